//! The Anthropic Messages wire format, as the stub speaks it.
//!
//! Streaming follows the real API's event sequence: `message_start`, one `ping`, then for each
//! content block (thinking, text, tool uses, in that order) `content_block_start`, its deltas and
//! `content_block_stop`, then `message_delta` (stop reason and output tokens) and
//! `message_stop`. Each event is `event: <name>\ndata: <one-line JSON>\n\n`. The non-streaming
//! answer is the same message as one JSON object.
//!
//! A scripted stream error is sent as `event: error` right after the last text delta, with the
//! text block left open and nothing after it, as when a real stream breaks mid-generation.
//!
//! Deliberately not here: request validation. The stub answers whatever it is sent; tests assert
//! on the recorded request instead.

use bytes::Bytes;
use serde_json::{Value, json};

use crate::plan::{Plan, PlannedUsage};

/// Prefix of generated tool call ids.
const TOOL_ID_PREFIX: &str = "toolu_stub_";

/// The message id for a turn.
fn message_id(plan: &Plan) -> String {
    format!("msg_stub_{}", plan.turn)
}

/// The stop reason the turn ends with.
fn stop_reason(plan: &Plan) -> &'static str {
    if plan.tools.is_empty() { "end_turn" } else { "tool_use" }
}

/// Usage as Anthropic reports it; `output_tokens` is the given figure.
fn usage(usage: &PlannedUsage, output_tokens: u64) -> Value {
    json!({
        "input_tokens": usage.input,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached.unwrap_or(0),
        "output_tokens": output_tokens,
    })
}

/// One SSE event. The data's `type` field always equals the event name, as in the real API.
fn event(name: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {name}\ndata: {data}\n\n"))
}

/// The streamed answer, one item per SSE event. Unless the turn has a stream error, the last item
/// is the terminal `message_stop`.
pub(crate) fn stream(plan: &Plan) -> Vec<Bytes> {
    let mut events = Vec::new();
    let start = json!({
        "id": message_id(plan),
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": [],
        "stop_reason": null,
        "stop_sequence": null,
        "usage": usage(&plan.usage, 1),
    });
    events.push(event("message_start", &json!({"type": "message_start", "message": start})));
    events.push(event("ping", &json!({"type": "ping"})));

    let mut index = 0usize;
    let block_start = |index: usize, block: Value| {
        event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": block}))
    };
    let delta = |index: usize, delta: Value| {
        event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta}))
    };
    let block_stop = |index: usize| event("content_block_stop", &json!({"type": "content_block_stop", "index": index}));

    if let Some((pieces, signature)) = &plan.thinking {
        events.push(block_start(index, json!({"type": "thinking", "thinking": ""})));
        for piece in pieces {
            events.push(delta(index, json!({"type": "thinking_delta", "thinking": piece})));
        }
        events.push(delta(index, json!({"type": "signature_delta", "signature": signature})));
        events.push(block_stop(index));
        index += 1;
    }

    if let Some(pieces) = &plan.text {
        events.push(block_start(index, json!({"type": "text", "text": ""})));
        for piece in pieces {
            events.push(delta(index, json!({"type": "text_delta", "text": piece})));
        }
        if plan.stream_error.is_none() {
            events.push(block_stop(index));
        }
        index += 1;
    }

    if let Some(error) = &plan.stream_error {
        events.push(event("error", &error_body(&error.kind, &error.message)));
        return events;
    }

    for tool in &plan.tools {
        events.push(block_start(
            index,
            json!({
                "type": "tool_use",
                "id": tool.id(TOOL_ID_PREFIX),
                "name": tool.name,
                "input": {},
            }),
        ));
        for piece in &tool.pieces {
            events.push(delta(index, json!({"type": "input_json_delta", "partial_json": piece})));
        }
        events.push(block_stop(index));
        index += 1;
    }

    events.push(event(
        "message_delta",
        &json!({
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(plan), "stop_sequence": null},
            "usage": {"output_tokens": plan.usage.output},
        }),
    ));
    events.push(event("message_stop", &json!({"type": "message_stop"})));
    events
}

/// The non-streaming answer.
pub(crate) fn message(plan: &Plan) -> Value {
    let mut content = Vec::new();
    if let Some((pieces, signature)) = &plan.thinking {
        content.push(json!({"type": "thinking", "thinking": pieces.concat(), "signature": signature}));
    }
    if let Some(pieces) = &plan.text {
        content.push(json!({"type": "text", "text": pieces.concat()}));
    }
    for tool in &plan.tools {
        content.push(json!({
            "type": "tool_use",
            "id": tool.id(TOOL_ID_PREFIX),
            "name": tool.name,
            "input": tool.input,
        }));
    }
    json!({
        "id": message_id(plan),
        "type": "message",
        "role": "assistant",
        "model": plan.model,
        "content": content,
        "stop_reason": stop_reason(plan),
        "stop_sequence": null,
        "usage": usage(&plan.usage, plan.usage.output),
    })
}

/// An error body in Anthropic's shape: `{"type":"error","error":{"type","message"}}`.
pub(crate) fn error_body(kind: &str, message: &str) -> Value {
    json!({"type": "error", "error": {"type": kind, "message": message}})
}
