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

/// One trace line.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct TraceEvent {
    /// Event type.
    pub event_type: String,
    /// Session id.
    pub session_id: String,
    /// Milliseconds since the UNIX epoch.
    pub timestamp: u64,
    /// The event's own fields.
    #[serde(flatten)]
    pub fields: Map<String, Value>,
}

impl TraceEvent {
    /// Build an event; `fields` must be a JSON object (anything else is stored under `value`).
    pub fn new(kind: TraceKind, session_id: &str, timestamp: u64, fields: Value) -> Self {
        let fields = match fields {
            Value::Object(m) => m,
            Value::Null => Map::new(),
            other => {
                let mut m = Map::new();
                m.insert("value".into(), other);
                m
            }
        };
        TraceEvent { event_type: kind.as_str().to_string(), session_id: session_id.to_string(), timestamp, fields }
    }
}

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
