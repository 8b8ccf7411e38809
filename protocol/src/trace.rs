//! Trace events: one JSON object per line of `trace.jsonl` (CONTRACT §9).
//!
//! Every line has `event_type`, `session_id` and `timestamp` (ms since the UNIX epoch); the
//! rest are the event's own fields. The kinds the contract requires are named in
//! [`TraceKind`], so a misspelt event type cannot be written.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Event types written to the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TraceKind {
    /// The session started (manifest, choices, credential sources).
    SessionStart,
    /// A task started running (accepted straight away, or its turn came in the queue).
    TaskStart,
    /// A task was accepted into the queue behind the running one (`lifecycle.task_acceptance:
    /// queue`); its text is here, so a resumed session runs it.
    TaskQueued,
    /// One inference call ended (driver, tokens, stop reason, duration).
    Inference,
    /// A provider answered 429 or 5xx and the call is sent again after a delay.
    InferenceRetry,
    /// A tool call is about to run (journaled before it starts).
    ToolCallStarted,
    /// One tool call ended (with its result).
    ToolCall,
    /// A session was resumed after the process stopped.
    SessionResumed,
    /// A task ended (exit status).
    TaskEnd,
    /// The session ended.
    SessionEnd,
    /// An actor was restarted by its supervisor.
    ActorRestarted,
    /// A diagnostic warning raised at launch.
    Warning,
    /// The spend meter refused a call.
    SpendCeilingReached,
    /// A setting was changed (operator or agent).
    ControlChange,
    /// A control request was refused.
    ControlRefused,
    /// A changed setting took effect on an inference call.
    ControlApplied,
    /// A tool asked a person for input (`request-input`); the task waits (`input-required`).
    InputRequired,
    /// A client answered a task waiting for input; the tool goes on with the answer.
    InputProvided,
    /// A hook call failed (trap, deadline, limit, or an error it returned); non-fatal.
    HookError,
    /// A hook returned an output its event does not honour (or a full async queue dropped
    /// an event); the output was discarded.
    HookDispatchError,
    /// A hook's `run-inference` call.
    HookInference,
    /// The context was compacted.
    Compaction,
    /// Occupancy reached the threshold but the context was kept as it was.
    CompactionDeclined,
    /// An `on-task-end` hook sent the task back (`reopen-task`).
    TaskReopened,
}

impl TraceKind {
    /// The `event_type` string.
    pub fn as_str(self) -> &'static str {
        match self {
            TraceKind::SessionStart => "session_start",
            TraceKind::TaskStart => "task_start",
            TraceKind::TaskQueued => "task_queued",
            TraceKind::Inference => "inference",
            TraceKind::InferenceRetry => "inference_retry",
            TraceKind::ToolCallStarted => "tool_call_started",
            TraceKind::ToolCall => "tool_call",
            TraceKind::SessionResumed => "session_resumed",
            TraceKind::TaskEnd => "task_end",
            TraceKind::SessionEnd => "session_end",
            TraceKind::ActorRestarted => "actor_restarted",
            TraceKind::Warning => "warning",
            TraceKind::SpendCeilingReached => "spend_ceiling_reached",
            TraceKind::ControlChange => "control_change",
            TraceKind::ControlRefused => "control_refused",
            TraceKind::ControlApplied => "control_applied",
            TraceKind::InputRequired => "input_required",
            TraceKind::InputProvided => "input_provided",
            TraceKind::HookError => "hook_error",
            TraceKind::HookDispatchError => "hook_dispatch_error",
            TraceKind::HookInference => "hook_inference",
            TraceKind::Compaction => "compaction",
            TraceKind::CompactionDeclined => "compaction_declined",
            TraceKind::TaskReopened => "task_reopened",
        }
    }
}

/// One trace line, serialized when it is made: `{"event_type":…,"session_id":…,"timestamp":…`
/// and then the event's own fields, in one buffer. A hot event (one per turn) passes a borrowed
/// struct of its fields, so the line costs one allocation and no intermediate JSON map.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceEvent {
    kind: TraceKind,
    line: Vec<u8>,
}

impl TraceEvent {
    /// Build an event from a JSON value; `fields` must be a JSON object (`null` is no fields;
    /// anything else is stored under `value`).
    pub fn new(kind: TraceKind, session_id: &str, timestamp: u64, fields: Value) -> Self {
        let fields = match fields {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => Map::from_iter([("value".to_string(), other)]),
        };
        // A JSON map of strings to values always serializes.
        Self::of(kind, session_id, timestamp, &fields)
            .unwrap_or_else(|e| Self::unserialized(kind, session_id, timestamp, &e))
    }

    /// Build an event from `fields`, anything that serializes as a JSON object (a struct or a
    /// map). An error is the serializer's; a value that is not an object is refused as one.
    pub fn of(
        kind: TraceKind,
        session_id: &str,
        timestamp: u64,
        fields: &impl Serialize,
    ) -> Result<Self, serde_json::Error> {
        let mut line = Self::head(kind, session_id, timestamp);
        let at = line.len();
        serde_json::to_writer(&mut line, fields)?;
        match &line[at..] {
            b"{}" => {
                line.truncate(at);
                line.push(b'}');
            }
            [b'{', ..] => line[at] = b',',
            _ => return Err(serde::ser::Error::custom("a trace event's fields must be a JSON object")),
        }
        Ok(TraceEvent { kind, line })
    }

    /// The event in place of one whose fields could not be serialized: what was meant, and why.
    pub fn unserialized(kind: TraceKind, session_id: &str, timestamp: u64, error: &serde_json::Error) -> Self {
        let mut line = Self::head(kind, session_id, timestamp);
        line.extend_from_slice(b",\"unserialized\":");
        // A string always serializes.
        let _ = serde_json::to_writer(&mut line, &error.to_string());
        line.push(b'}');
        TraceEvent { kind, line }
    }

    /// `{"event_type":…,"session_id":…,"timestamp":…` without the closing brace.
    fn head(kind: TraceKind, session_id: &str, timestamp: u64) -> Vec<u8> {
        use std::io::Write;
        let mut line = Vec::with_capacity(LINE_CAPACITY);
        line.extend_from_slice(b"{\"event_type\":\"");
        line.extend_from_slice(kind.as_str().as_bytes());
        line.extend_from_slice(b"\",\"session_id\":");
        // A string always serializes.
        let _ = serde_json::to_writer(&mut line, session_id);
        let _ = write!(line, ",\"timestamp\":{timestamp}");
        line
    }

    /// The event's kind.
    pub fn kind(&self) -> TraceKind {
        self.kind
    }

    /// The line's JSON text (one object, no newline).
    pub fn line(&self) -> &[u8] {
        &self.line
    }

    /// The line's JSON text, owned.
    pub fn into_line(self) -> Vec<u8> {
        self.line
    }
}

/// Room for a typical line without growing (an `inference` line is about 400 bytes).
const LINE_CAPACITY: usize = 512;

/// How a task ended (CONTRACT §9).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum ExitStatus {
    /// The model ended its turn with a reply.
    Ok,
    /// The task failed (driver error, guest failure...).
    Failed,
    /// The task used every turn.
    MaxTurnsReached,
    /// The spend meter refused a call.
    SpendCeilingReached,
    /// A client canceled it.
    Canceled,
}

impl ExitStatus {
    /// The snake_case string.
    pub fn as_str(self) -> &'static str {
        match self {
            ExitStatus::Ok => "ok",
            ExitStatus::Failed => "failed",
            ExitStatus::MaxTurnsReached => "max_turns_reached",
            ExitStatus::SpendCeilingReached => "spend_ceiling_reached",
            ExitStatus::Canceled => "canceled",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(e: &TraceEvent) -> Map<String, Value> {
        serde_json::from_slice(e.line()).expect("a trace line is one JSON object")
    }

    #[test]
    fn a_line_has_the_head_then_the_fields_of_a_struct_or_a_value() {
        #[derive(Serialize)]
        struct Fields<'a> {
            task_id: &'a str,
            turn: u32,
            error: Option<&'a str>,
        }
        let typed =
            TraceEvent::of(TraceKind::Inference, "ses_\"1\"", 7, &Fields { task_id: "t", turn: 3, error: None })
                .expect("a struct serializes");
        let from_value = TraceEvent::new(
            TraceKind::Inference,
            "ses_\"1\"",
            7,
            serde_json::json!({"task_id": "t", "turn": 3, "error": null}),
        );
        for e in [&typed, &from_value] {
            let m = parsed(e);
            assert_eq!(m["event_type"], "inference");
            assert_eq!(m["session_id"], "ses_\"1\"");
            assert_eq!(m["timestamp"], 7);
            assert_eq!(m["task_id"], "t");
            assert_eq!(m["turn"], 3);
            assert_eq!(m["error"], Value::Null);
            assert_eq!(m.len(), 6, "{}", String::from_utf8_lossy(e.line()));
            assert_eq!(e.kind(), TraceKind::Inference);
        }
    }

    #[test]
    fn no_fields_a_scalar_and_a_non_object_are_each_handled() {
        let none = TraceEvent::new(TraceKind::SessionEnd, "s", 1, Value::Null);
        assert_eq!(parsed(&none).len(), 3);
        #[derive(Serialize)]
        struct Empty {}
        assert_eq!(parsed(&TraceEvent::of(TraceKind::SessionEnd, "s", 1, &Empty {}).expect("empty")).len(), 3);
        let scalar = TraceEvent::new(TraceKind::SessionEnd, "s", 1, serde_json::json!(5));
        assert_eq!(parsed(&scalar)["value"], 5);
        let refused = TraceEvent::of(TraceKind::SessionEnd, "s", 1, &[1, 2]).expect_err("an array is not an object");
        let stand_in = TraceEvent::unserialized(TraceKind::SessionEnd, "s", 1, &refused);
        assert!(parsed(&stand_in)["unserialized"].as_str().is_some_and(|m| m.contains("JSON object")));
    }
}
