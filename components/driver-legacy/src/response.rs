//! Whole Anthropic Messages response → neutral response.
//!
//! Reads `content[]` (`text` blocks and `tool_use` blocks, in order),
//! `stop_reason` and `usage` of one non-streaming response and builds the
//! neutral `{stop_reason, content, usage?, error?}` (CONTRACT §3), plus the
//! full text for the single `emit-chunk` the driver makes.
//!
//! Stop mapping: `tool_use` → `tool_call`; `end_turn`/`stop_sequence` →
//! `end_turn`; `max_tokens` → `max_tokens`; anything else, or none, is an
//! error. A body `{"type": "error", ...}` is an error `<type>: <message>`.
//! On an error the content found so far is kept and `stop_reason` is
//! `"error"`.
//!
//! Deliberately not done: thinking and every other block type are ignored
//! (this fixture is text-only).

use serde_json::{Map, Value, json};

/// The neutral response, the text to emit, and the failure if any.
pub struct Parsed {
    pub response: Value,
    pub text: String,
    pub error: Option<String>,
}

pub fn parse(body: &Value) -> Parsed {
    if body.get("type").and_then(Value::as_str) == Some("error") {
        let kind = body.pointer("/error/type").and_then(Value::as_str).unwrap_or("error");
        let message = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("(no message)");
        return failed(Vec::new(), String::new(), None, format!("{kind}: {message}"));
    }
    let mut content = Vec::new();
    let mut text = String::new();
    for block in body.get("content").and_then(Value::as_array).map(Vec::as_slice).unwrap_or_default() {
        let field = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or("");
        match field("type") {
            "text" if !field("text").is_empty() => {
                text.push_str(field("text"));
                content.push(json!({"type": "text", "text": field("text")}));
            }
            "tool_use" => {
                let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                content.push(json!({"type": "tool_call", "id": field("id"), "name": field("name"), "input": input}));
            }
            _ => {}
        }
    }
    let usage = body.get("usage").and_then(usage);
    let stop_reason = match body.get("stop_reason").and_then(Value::as_str) {
        Some("tool_use") => "tool_call",
        Some("end_turn" | "stop_sequence") => "end_turn",
        Some("max_tokens") => "max_tokens",
        Some(other) => return failed(content, text, usage, format!("unsupported stop_reason `{other}`")),
        None => return failed(content, text, usage, "the response carried no stop_reason".into()),
    };
    let mut response = Map::new();
    response.insert("stop_reason".into(), stop_reason.into());
    response.insert("content".into(), Value::Array(content));
    if let Some(u) = usage {
        response.insert("usage".into(), u);
    }
    Parsed { response: Value::Object(response), text, error: None }
}

fn failed(content: Vec<Value>, text: String, usage: Option<Value>, error: String) -> Parsed {
    let mut response = Map::new();
    response.insert("stop_reason".into(), "error".into());
    response.insert("content".into(), Value::Array(content));
    if let Some(u) = usage {
        response.insert("usage".into(), u);
    }
    response.insert("error".into(), error.clone().into());
    Parsed { response: Value::Object(response), text, error: Some(error) }
}

/// A provider `usage` in the neutral shape; `None` when it holds no count.
fn usage(usage: &Value) -> Option<Value> {
    let count = |key: &str| usage.get(key).and_then(Value::as_u64);
    let (input, output) = (count("input_tokens"), count("output_tokens"));
    if input.is_none() && output.is_none() {
        return None;
    }
    let mut neutral = json!({"input_tokens": input.unwrap_or(0), "output_tokens": output.unwrap_or(0)});
    if let Some(n) = count("cache_read_input_tokens") {
        neutral["cached_tokens"] = n.into();
    }
    if let Some(n) = count("cache_creation_input_tokens") {
        neutral["cache_write_tokens"] = n.into();
    }
    Some(neutral)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_tool_call_response() {
        let p = parse(&json!({
            "type": "message", "role": "assistant", "stop_reason": "tool_use",
            "content": [{"type": "thinking", "thinking": "x", "signature": "s"}, {"type": "text", "text": "Let "},
                        {"type": "text", "text": "me."}, {"type": "tool_use", "id": "tu", "name": "files", "input": {"op": "list"}}],
            "usage": {"input_tokens": 9, "output_tokens": 4, "cache_read_input_tokens": 2}
        }));
        assert_eq!(p.error, None);
        assert_eq!(p.text, "Let me.");
        assert_eq!(
            p.response,
            json!({
                "stop_reason": "tool_call",
                "content": [{"type": "text", "text": "Let "}, {"type": "text", "text": "me."},
                            {"type": "tool_call", "id": "tu", "name": "files", "input": {"op": "list"}}],
                "usage": {"input_tokens": 9, "output_tokens": 4, "cached_tokens": 2}
            })
        );
    }

    #[test]
    fn failures_keep_content() {
        let p = parse(&json!({"content": [{"type": "text", "text": "hm"}], "stop_reason": "refusal"}));
        assert_eq!(p.error.as_deref(), Some("unsupported stop_reason `refusal`"));
        assert_eq!(
            p.response,
            json!({"stop_reason": "error", "error": "unsupported stop_reason `refusal`",
                                      "content": [{"type": "text", "text": "hm"}]})
        );
        let p = parse(&json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}));
        assert_eq!(p.error.as_deref(), Some("overloaded_error: Overloaded"));
        let p = parse(&json!({"content": []}));
        assert_eq!(p.error.as_deref(), Some("the response carried no stop_reason"));
        for (raw, want) in [("end_turn", "end_turn"), ("stop_sequence", "end_turn"), ("max_tokens", "max_tokens")] {
            assert_eq!(parse(&json!({"stop_reason": raw})).response["stop_reason"], want);
        }
    }
}
