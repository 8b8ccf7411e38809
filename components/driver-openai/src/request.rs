//! Neutral request → OpenAI Chat Completions request body.
//!
//! Input is the runtime's provider-neutral request (CONTRACT §3); output is
//! the JSON body for `POST {endpoint}/chat/completions` with `stream: true`
//! and `stream_options: {include_usage: true}`.
//!
//! Translation rules:
//! - a non-empty `system` becomes the first message, `{role: "system"}`;
//! - a user message whose blocks are all text is sent with a plain string
//!   `content`; one with an image is sent as content parts (`text` and
//!   `image_url` with a `data:<media_type>;base64,<data>` URL);
//! - an assistant message becomes `{role: "assistant", content, tool_calls?}`:
//!   `content` is its text (or `null` when it has none), each `tool_call`
//!   block becomes a `function` call whose `arguments` is the input
//!   serialised as a JSON string;
//! - each neutral `tool` message becomes its own `{role: "tool",
//!   tool_call_id, content}` message. Chat Completions has no error flag on
//!   a tool result, so when `is_error` is true the content is prefixed with
//!   `error: ` (unless it already starts with that), which is how the model
//!   learns that the call failed;
//! - several text blocks of one message are joined with `\n`; empty text
//!   blocks are dropped; a user or assistant message left with nothing to
//!   send is dropped (a tool message is always sent, even empty, because
//!   every tool call must be answered);
//! - a tool's `parameters` schema without `type` gets `"type": "object"`,
//!   and an object schema without `properties` gets `"properties": {}` (so
//!   `{}` becomes `{"type":"object","properties":{}}`);
//! - every key of `params` is copied to the top level and may replace
//!   `max_tokens` or `stream_options`; when `params` has
//!   `max_completion_tokens` and no `max_tokens`, `max_tokens` is not sent
//!   (newer OpenAI models refuse the two together).
//!
//! Deliberately not done: `thinking` and `redacted_thinking` blocks are not
//! sent (Chat Completions takes no reasoning input); images inside tool
//! results are not sent (a `tool` message carries text only); unknown block
//! types are skipped. `params` cannot replace the keys built here from the
//! conversation (`model`, `messages`, `tools`, `stream`); such keys in
//! `params` are ignored. `produced_by`, `prompt_cache_key` and
//! `continuation_id` never reach the provider: every message is rebuilt from
//! the fields Chat Completions knows.

use serde_json::{Map, Value, json};

/// Keys built from the conversation; `params` cannot override them.
const RESERVED: [&str; 4] = ["model", "messages", "tools", "stream"];

/// Translate the neutral request. The error says which field is wrong.
pub fn translate(req: &Value) -> Result<Value, String> {
    let req = req.as_object().ok_or("the request must be a JSON object")?;
    let model = match req.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => return Err("`model` must be a non-empty string".into()),
    };
    let max_tokens = match req.get("max_tokens").and_then(Value::as_u64) {
        Some(n) if n > 0 => n,
        _ => return Err("`max_tokens` must be a positive integer".into()),
    };
    let mut wire = Vec::new();
    match req.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => wire.push(json!({"role": "system", "content": s})),
        Some(_) => return Err("`system` must be a string".into()),
    }
    match req.get("messages") {
        Some(Value::Array(list)) => messages(list, &mut wire)?,
        _ => return Err("`messages` must be an array".into()),
    }
    let tools = match req.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => tools(t)?,
        Some(_) => return Err("`tools` must be an array".into()),
    };

    let mut body = Map::new();
    body.insert("model".into(), Value::String(model));
    body.insert("messages".into(), Value::Array(wire));
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("max_tokens".into(), max_tokens.into());
    body.insert("stream".into(), Value::Bool(true));
    body.insert("stream_options".into(), json!({"include_usage": true}));
    match req.get("params") {
        None | Some(Value::Null) => {}
        Some(Value::Object(params)) => {
            for (k, v) in params {
                if !RESERVED.contains(&k.as_str()) {
                    body.insert(k.clone(), v.clone());
                }
            }
            if params.contains_key("max_completion_tokens") && !params.contains_key("max_tokens") {
                body.remove("max_tokens");
            }
        }
        Some(_) => return Err("`params` must be an object".into()),
    }
    Ok(Value::Object(body))
}

fn messages(list: &[Value], out: &mut Vec<Value>) -> Result<(), String> {
    for (i, msg) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = msg.get("role").and_then(Value::as_str).ok_or(format!("{at}.role must be a string"))?;
        let blocks = content(msg, &at)?;
        match role {
            "user" => out.extend(user(&blocks, &at)?),
            "assistant" => out.extend(assistant(&blocks, &at)?),
            "tool" => out.push(tool(msg, &blocks, &at)?),
            other => return Err(format!("{at}.role: unknown role `{other}` (user, assistant or tool)")),
        }
    }
    Ok(())
}

/// A message's blocks; a bare string is accepted as one text block.
fn content(msg: &Value, at: &str) -> Result<Vec<Value>, String> {
    match msg.get("content") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![json!({"type": "text", "text": s})]),
        Some(Value::Array(blocks)) => Ok(blocks.clone()),
        Some(_) => Err(format!("{at}.content must be an array of blocks")),
    }
}

fn block_type(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

fn str_field<'a>(block: &'a Value, key: &str, at: &str) -> Result<&'a str, String> {
    block.get(key).and_then(Value::as_str).ok_or(format!("{at}.{key} must be a string"))
}

/// The non-empty texts of a message's text blocks, in order.
fn texts<'a>(blocks: &'a [Value], at: &str) -> Result<Vec<&'a str>, String> {
    let mut out = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        if block_type(block) == "text" {
            let text = str_field(block, "text", &format!("{at}.content[{j}]"))?;
            if !text.is_empty() {
                out.push(text);
            }
        }
    }
    Ok(out)
}

fn user(blocks: &[Value], at: &str) -> Result<Option<Value>, String> {
    let mut parts = Vec::new();
    let mut has_image = false;
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match block_type(block) {
            "text" => {
                let text = str_field(block, "text", &at)?;
                if !text.is_empty() {
                    parts.push(json!({"type": "text", "text": text}));
                }
            }
            "image" => {
                has_image = true;
                parts.push(image(block, &at)?);
            }
            _ => {}
        }
    }
    if parts.is_empty() {
        return Ok(None);
    }
    let content = if has_image { Value::Array(parts) } else { Value::String(texts(blocks, at)?.join("\n")) };
    Ok(Some(json!({"role": "user", "content": content})))
}

fn image(block: &Value, at: &str) -> Result<Value, String> {
    let source = block.get("source").ok_or(format!("{at}.source is missing"))?;
    let at = format!("{at}.source");
    let media_type = str_field(source, "media_type", &at)?;
    let data = str_field(source, "data", &at)?;
    Ok(json!({"type": "image_url", "image_url": {"url": format!("data:{media_type};base64,{data}")}}))
}

fn assistant(blocks: &[Value], at: &str) -> Result<Option<Value>, String> {
    let text = texts(blocks, at)?.join("\n");
    let mut calls = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        if block_type(block) == "tool_call" {
            let at = format!("{at}.content[{j}]");
            calls.push(json!({
                "id": str_field(block, "id", &at)?,
                "type": "function",
                "function": {"name": str_field(block, "name", &at)?, "arguments": arguments(block.get("input"))},
            }));
        }
    }
    if text.is_empty() && calls.is_empty() {
        return Ok(None);
    }
    let mut msg =
        json!({"role": "assistant", "content": if text.is_empty() { Value::Null } else { Value::String(text) }});
    if !calls.is_empty() {
        msg["tool_calls"] = Value::Array(calls);
    }
    Ok(Some(msg))
}

/// A tool call's input as Chat Completions wants it: a JSON string. A
/// string input that already holds JSON is sent as it is; a missing or null
/// input is `"{}"`.
fn arguments(input: Option<&Value>) -> String {
    match input {
        None | Some(Value::Null) => "{}".to_string(),
        Some(Value::String(s)) if serde_json::from_str::<Value>(s).is_ok() => s.clone(),
        Some(v) => v.to_string(),
    }
}

fn tool(msg: &Value, blocks: &[Value], at: &str) -> Result<Value, String> {
    let id = msg
        .get("tool_call_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or(format!("{at}: a tool message needs a non-empty `tool_call_id`"))?;
    let mut text = texts(blocks, at)?.join("\n");
    if msg.get("is_error").and_then(Value::as_bool).unwrap_or(false) && !text.starts_with("error: ") {
        text = if text.is_empty() { "error".to_string() } else { format!("error: {text}") };
    }
    Ok(json!({"role": "tool", "tool_call_id": id, "content": text}))
}

fn tools(list: &[Value]) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let name = str_field(tool, "name", &at)?;
        let mut schema = match tool.get("parameters") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(s)) => s.clone(),
            Some(_) => return Err(format!("{at}.parameters must be a JSON Schema object")),
        };
        schema.entry("type").or_insert_with(|| Value::String("object".into()));
        if schema.get("type").and_then(Value::as_str) == Some("object") {
            schema.entry("properties").or_insert_with(|| json!({}));
        }
        let mut function = json!({"name": name, "parameters": schema});
        if let Some(d) = tool.get("description").and_then(Value::as_str).filter(|d| !d.is_empty()) {
            function["description"] = Value::String(d.to_string());
        }
        out.push(json!({"type": "function", "function": function}));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_translation() {
        let req = json!({
            "model": "gpt-x", "max_tokens": 100, "system": "be brief",
            "prompt_cache_key": "cap:1", "continuation_id": "c1",
            "params": {"temperature": 0.5, "model": "ignored", "messages": [], "stream": false,
                       "tool_choice": "auto", "max_tokens": 50},
            "tools": [{"name": "files", "parameters": {}},
                      {"name": "t2", "description": "d", "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}},
                      {"name": "t3", "description": ""}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "weird"}, {"type": "text", "text": "there"}]},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                    {"type": "image", "source": {"media_type": "image/png", "data": "AAA"}}]},
                {"role": "assistant", "produced_by": {"driver": "d", "model": "m"}, "content": [
                    {"type": "thinking", "text": "hmm", "signature": "sig"},
                    {"type": "redacted_thinking", "data": "opaque"},
                    {"type": "text", "text": "calling"},
                    {"type": "tool_call", "id": "tc1", "name": "files", "input": {"op": "list"}},
                    {"type": "tool_call", "id": "tc2", "name": "t2", "input": {}},
                    {"type": "tool_call", "id": "tc3", "name": "t3"}]},
                {"role": "tool", "tool_call_id": "tc1", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "tool", "tool_call_id": "tc2", "is_error": true, "content": [{"type": "text", "text": "boom"}]},
                {"role": "tool", "tool_call_id": "tc3", "is_error": true, "content": "error: already"},
                {"role": "assistant", "content": [{"type": "thinking", "text": "only thoughts", "signature": ""}]},
                {"role": "assistant", "content": [{"type": "text", "text": "done"}]}
            ]
        });
        let body = translate(&req).unwrap();
        let expected = json!({
            "model": "gpt-x", "max_tokens": 50, "stream": true, "stream_options": {"include_usage": true},
            "temperature": 0.5, "tool_choice": "auto",
            "tools": [
                {"type": "function", "function": {"name": "files", "parameters": {"type": "object", "properties": {}}}},
                {"type": "function", "function": {"name": "t2", "description": "d",
                    "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}},
                {"type": "function", "function": {"name": "t3", "parameters": {"type": "object", "properties": {}}}}],
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "hi\nthere"},
                {"role": "user", "content": [{"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAA"}}]},
                {"role": "assistant", "content": "calling", "tool_calls": [
                    {"id": "tc1", "type": "function", "function": {"name": "files", "arguments": "{\"op\":\"list\"}"}},
                    {"id": "tc2", "type": "function", "function": {"name": "t2", "arguments": "{}"}},
                    {"id": "tc3", "type": "function", "function": {"name": "t3", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "tc1", "content": "a\nb"},
                {"role": "tool", "tool_call_id": "tc2", "content": "error: boom"},
                {"role": "tool", "tool_call_id": "tc3", "content": "error: already"},
                {"role": "assistant", "content": "done"}
            ]
        });
        assert_eq!(body, expected);
    }

    #[test]
    fn tool_calls_without_text_have_null_content_and_empty_errors_say_error() {
        let req = json!({"model": "m", "max_tokens": 1, "system": "", "tools": [], "messages": [
            {"role": "assistant", "content": [{"type": "tool_call", "id": "c", "name": "n", "input": "{\"a\":1}"}]},
            {"role": "tool", "tool_call_id": "c", "is_error": true, "content": []},
            {"role": "tool", "tool_call_id": "d", "content": []}]});
        let body = translate(&req).unwrap();
        assert_eq!(
            body["messages"],
            json!([
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "n", "arguments": "{\"a\":1}"}}]},
            {"role": "tool", "tool_call_id": "c", "content": "error"},
            {"role": "tool", "tool_call_id": "d", "content": ""}])
        );
        assert!(body.get("tools").is_none(), "empty tools are omitted");
    }

    #[test]
    fn max_completion_tokens_replaces_max_tokens() {
        let req = json!({"model": "m", "max_tokens": 9, "messages": [], "params": {"max_completion_tokens": 7}});
        let body = translate(&req).unwrap();
        assert_eq!(
            body,
            json!({"model": "m", "messages": [], "max_completion_tokens": 7, "stream": true,
                                "stream_options": {"include_usage": true}})
        );
    }

    #[test]
    fn errors_name_the_field() {
        let e = translate(&json!({"max_tokens": 1, "messages": []})).unwrap_err();
        assert!(e.contains("`model`"), "{e}");
        let e = translate(&json!({"model": "m", "max_tokens": 0, "messages": []})).unwrap_err();
        assert!(e.contains("`max_tokens`"), "{e}");
        let e = translate(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": []}]}))
            .unwrap_err();
        assert!(e.contains("messages[0]") && e.contains("tool_call_id"), "{e}");
        let e = translate(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": []}]}))
            .unwrap_err();
        assert!(e.contains("unknown role"), "{e}");
        let e = translate(&json!({"model": "m", "max_tokens": 1, "messages": [], "params": []})).unwrap_err();
        assert!(e.contains("`params`"), "{e}");
        let e = translate(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
            {"type": "image", "source": {"media_type": "image/png"}}]}]}))
        .unwrap_err();
        assert!(e.contains("messages[0].content[0].source.data"), "{e}");
    }
}
