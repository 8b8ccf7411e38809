//! The OpenAI Chat Completions wire format, as the stub speaks it.
//!
//! Streaming follows the real API: `data: <chunk JSON>\n\n` chunks of type
//! `chat.completion.chunk`. The first chunk carries the role (and empty content), then the text
//! arrives in `content` pieces, then each tool call: a first piece with its index, id, type and
//! name and empty arguments, later pieces with only the index and an arguments fragment. A chunk
//! with an empty delta carries the finish reason; when the request asked for
//! `stream_options.include_usage`, every chunk has `"usage": null` and a usage-only chunk with
//! `choices: []` follows; `data: [DONE]` ends the stream. The non-streaming answer is one
//! `chat.completion` object.
//!
//! A scripted stream error is sent as `data: {"error":{...}}` after the text, and nothing follows.
//! Thinking has no place in this format and is left out.
//!
//! Deliberately not here: request validation (see the Anthropic module's note).

use bytes::Bytes;
use serde_json::{Value, json};

use crate::plan::Plan;

/// Prefix of generated tool call ids.
const TOOL_ID_PREFIX: &str = "call_stub_";

/// The completion id for a turn.
fn completion_id(plan: &Plan) -> String {
    format!("chatcmpl-stub-{}", plan.turn)
}

/// The finish reason the turn ends with.
fn finish_reason(plan: &Plan) -> &'static str {
    if plan.tools.is_empty() { "stop" } else { "tool_calls" }
}

/// Usage as OpenAI reports it; `prompt_tokens_details` only when cached tokens are scripted.
fn usage(plan: &Plan) -> Value {
    let u = &plan.usage;
    let mut usage = json!({
        "prompt_tokens": u.input,
        "completion_tokens": u.output,
        "total_tokens": u.input.saturating_add(u.output),
    });
    if let (Some(cached), Some(fields)) = (u.cached, usage.as_object_mut()) {
        fields.insert("prompt_tokens_details".to_owned(), json!({"cached_tokens": cached}));
    }
    usage
}

/// One SSE event.
fn data(value: &Value) -> Bytes {
    Bytes::from(format!("data: {value}\n\n"))
}

/// The streamed answer, one item per SSE event. Unless the turn has a stream error, the last item
/// is the terminal `data: [DONE]`.
pub(crate) fn stream(plan: &Plan, include_usage: bool) -> Vec<Bytes> {
    let chunk = |delta: Value, finish: Option<&str>| {
        let mut chunk = json!({
            "id": completion_id(plan),
            "object": "chat.completion.chunk",
            "created": plan.created,
            "model": plan.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        });
        if let (true, Some(fields)) = (include_usage, chunk.as_object_mut()) {
            fields.insert("usage".to_owned(), Value::Null);
        }
        data(&chunk)
    };

    let mut events = vec![chunk(json!({"role": "assistant", "content": ""}), None)];
    for piece in plan.text.iter().flatten() {
        events.push(chunk(json!({"content": piece}), None));
    }

    if let Some(error) = &plan.stream_error {
        events.push(data(&error_body(&error.kind, &error.message)));
        return events;
    }

    for (index, tool) in plan.tools.iter().enumerate() {
        events.push(chunk(
            json!({"tool_calls": [{
                "index": index,
                "id": tool.id(TOOL_ID_PREFIX),
                "type": "function",
                "function": {"name": tool.name, "arguments": ""},
            }]}),
            None,
        ));
        for piece in &tool.pieces {
            events.push(chunk(json!({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}), None));
        }
    }

    events.push(chunk(json!({}), Some(finish_reason(plan))));
    if include_usage {
        events.push(data(&json!({
            "id": completion_id(plan),
            "object": "chat.completion.chunk",
            "created": plan.created,
            "model": plan.model,
            "choices": [],
            "usage": usage(plan),
        })));
    }
    events.push(Bytes::from_static(b"data: [DONE]\n\n"));
    events
}

/// The non-streaming answer.
pub(crate) fn completion(plan: &Plan) -> Value {
    let content = plan.text.as_ref().map_or(Value::Null, |pieces| Value::String(pieces.concat()));
    let mut message = json!({"role": "assistant", "content": content});
    if !plan.tools.is_empty()
        && let Some(fields) = message.as_object_mut()
    {
        let calls: Vec<Value> = plan
            .tools
            .iter()
            .map(|tool| {
                json!({
                    "id": tool.id(TOOL_ID_PREFIX),
                    "type": "function",
                    "function": {"name": tool.name, "arguments": tool.arguments()},
                })
            })
            .collect();
        fields.insert("tool_calls".to_owned(), Value::Array(calls));
    }
    json!({
        "id": completion_id(plan),
        "object": "chat.completion",
        "created": plan.created,
        "model": plan.model,
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason(plan)}],
        "usage": usage(plan),
    })
}

/// An error body in OpenAI's shape: `{"error":{"message","type","param","code"}}`.
pub(crate) fn error_body(kind: &str, message: &str) -> Value {
    json!({"error": {"message": message, "type": kind, "param": null, "code": null}})
}
