//! The loop's trace lines: how it makes them (stamped with its session and the time), and the
//! fields of the lines every turn writes (`inference`, `tool_call_started`, `tool_call`) as
//! borrowed structs. Those are serialized straight from the loop's own values, without a JSON
//! map of copied keys and values in between (about 50 allocations a turn). The names and
//! meanings are CONTRACT §9's; the rarer lines are written from `json!` values.

use capsule_protocol::neutral::StopReason;
use capsule_protocol::trace::{TraceEvent, TraceKind};
use serde::Serialize;

use super::LoopState;
use crate::journal::JournalMsg;
use crate::names::role;

impl LoopState {
    /// A trace line that no step waits for (an observation, not a step).
    pub(crate) fn trace(&self, kind: TraceKind, fields: serde_json::Value) {
        self.trace_event(self.event(kind, fields));
    }

    /// [`trace`](LoopState::trace) for an event already made.
    pub(crate) fn trace_event(&self, event: TraceEvent) {
        let kind = event.kind();
        if let Err(e) = self.peer(role::JOURNAL).tell(JournalMsg::Trace(event)) {
            tracing::error!(session = self.sid(), error = %e, kind = kind.as_str(), "a trace line was not written");
        }
    }

    /// A trace line of this session, stamped now, from a JSON value.
    pub(crate) fn event(&self, kind: TraceKind, fields: serde_json::Value) -> TraceEvent {
        TraceEvent::new(kind, self.sid(), crate::now_ms(), fields)
    }

    /// A trace line of this session, stamped now, from a struct of its fields (the lines every
    /// turn writes, [`super::lines`]). One that does not serialize (not expected of those
    /// types) is written as what was meant and why, and logged.
    pub(crate) fn event_of(&self, kind: TraceKind, fields: &impl serde::Serialize) -> TraceEvent {
        let now = crate::now_ms();
        TraceEvent::of(kind, self.sid(), now, fields).unwrap_or_else(|e| {
            tracing::error!(session = self.sid(), error = %e, kind = kind.as_str(), "a trace line's fields did not serialize");
            TraceEvent::unserialized(kind, self.sid(), now, &e)
        })
    }
}

/// `inference`: one provider call ended.
#[derive(Serialize)]
pub(crate) struct InferenceLine<'a> {
    pub task_id: &'a str,
    pub turn: u32,
    pub driver: &'a str,
    pub model: &'a str,
    /// The model's stop reason, or `error` when the call failed.
    pub stop_reason: Stop,
    /// Why the call failed; `null` when it did not.
    pub error: Option<CallFailure<'a>>,
    pub input_tokens_estimate: u64,
    pub input_tokens_actual: Option<u64>,
    pub output_tokens_actual: Option<u64>,
    pub duration_ms: f64,
    pub call_ms: f64,
    pub instantiate_us: u64,
    pub instance_made_ahead: bool,
    /// Only when the capsule declares alternates (nothing of the choices feature otherwise).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub driver_choice: Option<&'a str>,
}

/// A stop reason as the trace writes it.
#[derive(Serialize)]
#[serde(untagged)]
pub(crate) enum Stop {
    /// The model's own.
    Model(StopReason),
    /// The call failed: `"error"`.
    Failed(&'static str),
}

/// The `error` object of a failed call.
#[derive(Serialize)]
pub(crate) struct CallFailure<'a> {
    pub code: &'static str,
    pub message: &'a str,
}

/// `tool_call_started`: journaled before the tool runs.
#[derive(Serialize, Clone, Copy)]
pub(crate) struct ToolStartedLine<'a> {
    pub task_id: &'a str,
    pub tool_call_id: &'a str,
    pub tool_name: &'a str,
    pub input: &'a serde_json::Value,
}

/// `tool_call`: one tool call ended, with the start of its result: the fields of its
/// `tool_call_started` line, then the result's.
#[derive(Serialize)]
pub(crate) struct ToolCallLine<'a> {
    #[serde(flatten)]
    pub call: ToolStartedLine<'a>,
    pub is_error: bool,
    pub duration_ms: u64,
    pub instance_made_ahead: bool,
    pub code: Option<&'static str>,
    /// The first `ARTIFACT_FRAME_BYTES` of the result.
    pub content: &'a str,
    pub content_bytes: usize,
    pub output_file: Option<&'a str>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    /// The typed lines write what the `json!` maps they replaced wrote, key for key.
    #[test]
    fn each_line_has_the_fields_the_json_maps_had() {
        let input = json!({"op": "list", "path": "."});
        let ok = InferenceLine {
            task_id: "t",
            turn: 2,
            driver: "anthropic",
            model: "m",
            stop_reason: Stop::Model(StopReason::ToolCall),
            error: None,
            input_tokens_estimate: 10,
            input_tokens_actual: Some(9),
            output_tokens_actual: None,
            duration_ms: 1.5,
            call_ms: 0.5,
            instantiate_us: 7,
            instance_made_ahead: true,
            driver_choice: None,
        };
        assert_eq!(
            serde_json::to_value(&ok).expect("serializes"),
            json!({"task_id": "t", "turn": 2, "driver": "anthropic", "model": "m", "stop_reason": "tool_call",
                "error": null, "input_tokens_estimate": 10, "input_tokens_actual": 9, "output_tokens_actual": null,
                "duration_ms": 1.5, "call_ms": 0.5, "instantiate_us": 7, "instance_made_ahead": true})
        );
        let failed = InferenceLine {
            stop_reason: Stop::Failed("error"),
            error: Some(CallFailure { code: "E-X", message: "why" }),
            driver_choice: Some("fast"),
            ..ok
        };
        let v = serde_json::to_value(&failed).expect("serializes");
        assert_eq!(v["stop_reason"], "error");
        assert_eq!(v["error"], json!({"code": "E-X", "message": "why"}));
        assert_eq!(v["driver_choice"], "fast");
        let started = ToolStartedLine { task_id: "t", tool_call_id: "c", tool_name: "files", input: &input };
        assert_eq!(
            serde_json::to_value(started).expect("serializes"),
            json!({"task_id": "t", "tool_call_id": "c", "tool_name": "files", "input": input})
        );
        let done = ToolCallLine {
            call: started,
            is_error: false,
            duration_ms: 3,
            instance_made_ahead: false,
            code: None,
            content: "[]",
            content_bytes: 2,
            output_file: None,
        };
        let v = serde_json::to_value(&done).expect("serializes");
        assert_eq!(v.as_object().map(|m| m.len()), Some(11));
        assert_eq!(
            (v["code"].clone(), v["output_file"].clone(), v["content"].clone()),
            (Value::Null, Value::Null, json!("[]"))
        );
    }
}
