//! The loop's spans (`observability.otel_endpoint`, see `crate::otel`): a finished child of
//! the running task's span per inference call, tool call and compaction; the task span ends
//! with the task, the session span with the session.

use opentelemetry::KeyValue;
use std::time::{Instant, SystemTime};

use super::LoopState;

impl LoopState {
    /// A finished child span of the running task that began at `started`.
    pub(crate) fn span(&self, name: &'static str, started: Instant, attributes: Vec<KeyValue>) {
        let (Some(t), Some(cx)) = (&self.config.telemetry, self.running.as_ref().and_then(|r| r.span.as_ref())) else {
            return;
        };
        let start = SystemTime::now().checked_sub(started.elapsed()).unwrap_or_else(SystemTime::now);
        t.child(cx, name, start, attributes);
    }

    /// The running task's `traceparent`, for its driver calls.
    pub(crate) fn task_traceparent(&self) -> Option<String> {
        self.running.as_ref().and_then(|r| r.span.as_ref()).and_then(crate::otel::traceparent)
    }
}
