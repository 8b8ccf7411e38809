//! Neutral request → non-streaming Anthropic Messages request body.
//!
//! A text-only translation, as an older driver would have done it: `system`
//! (when non-empty), user and assistant text, assistant `tool_call` blocks as
//! `tool_use`, each run of consecutive `tool` messages as ONE user message of
//! `tool_result` blocks (content: the message's text joined with `\n`,
//! `is_error` copied), tools with their schema as `input_schema` (`type:
//! object` added when missing), the other `params` keys copied to the top
//! level, and `stream: false`.
//!
//! Deliberately not done: images, thinking blocks and unknown block types
//! are skipped; a message left empty is dropped; `params` cannot replace
//! `model`, `max_tokens`, `system`, `messages`, `tools` or `stream`;
//! `produced_by`, `prompt_cache_key` and `continuation_id` are never sent.

use serde_json::{Map, Value, json};

const RESERVED: [&str; 6] = ["model", "max_tokens", "system", "messages", "tools", "stream"];

/// Translate the neutral request. The error says which field is wrong.
pub fn translate(req: &Value) -> Result<Value, String> {
    let req = req.as_object().ok_or("the request must be a JSON object")?;
    let model = req.get("model").and_then(Value::as_str).filter(|m| !m.is_empty());
    let model = model.ok_or("`model` must be a non-empty string")?;
    let max_tokens = req.get("max_tokens").and_then(Value::as_u64).filter(|n| *n > 0);
    let max_tokens = max_tokens.ok_or("`max_tokens` must be a positive integer")?;
    let mut body = Map::new();
    match req.get("params") {
        None | Some(Value::Null) => {}
        Some(Value::Object(params)) => {
            for (k, v) in params.iter().filter(|(k, _)| !RESERVED.contains(&k.as_str())) {
                body.insert(k.clone(), v.clone());
            }
        }
        Some(_) => return Err("`params` must be an object".into()),
    }
    body.insert("model".into(), model.into());
    body.insert("max_tokens".into(), max_tokens.into());
    match req.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => {
            body.insert("system".into(), s.clone().into());
        }
        Some(_) => return Err("`system` must be a string".into()),
    }
    let list = req.get("messages").and_then(Value::as_array).ok_or("`messages` must be an array")?;
    body.insert("messages".into(), Value::Array(messages(list)?));
    let tools = match req.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => tools(t)?,
        Some(_) => return Err("`tools` must be an array".into()),
    };
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), false.into());
    Ok(Value::Object(body))
}

fn messages(list: &[Value]) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    let mut results = Vec::new();
    for (i, msg) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = msg.get("role").and_then(Value::as_str).ok_or(format!("{at}.role must be a string"))?;
        let blocks = match msg.get("content") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::String(s)) => vec![json!({"type": "text", "text": s})],
            Some(Value::Array(b)) => b.clone(),
            Some(_) => return Err(format!("{at}.content must be an array of blocks")),
        };
        if role == "tool" {
            let id = msg.get("tool_call_id").and_then(Value::as_str).filter(|id| !id.is_empty());
            let id = id.ok_or(format!("{at}: a tool message needs a non-empty `tool_call_id`"))?;
            let is_error = msg.get("is_error").and_then(Value::as_bool).unwrap_or(false);
            let mut result = json!({"type": "tool_result", "tool_use_id": id, "is_error": is_error});
            let text = texts(&blocks, &at)?.join("\n");
            if !text.is_empty() {
                result["content"] = text.into();
            }
            results.push(result);
            continue;
        }
        if !results.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(&mut results)}));
        }
        let mut content: Vec<Value> =
            texts(&blocks, &at)?.into_iter().map(|t| json!({"type": "text", "text": t})).collect();
        match role {
            "user" => {}
            "assistant" => {
                for (j, block) in blocks.iter().enumerate() {
                    if block.get("type").and_then(Value::as_str) == Some("tool_call") {
                        let at = format!("{at}.content[{j}]");
                        let input = match block.get("input") {
                            None | Some(Value::Null) => json!({}),
                            Some(v) => v.clone(),
                        };
                        content.push(json!({"type": "tool_use", "id": field(block, "id", &at)?,
                                            "name": field(block, "name", &at)?, "input": input}));
                    }
                }
            }
            other => return Err(format!("{at}.role: unknown role `{other}` (user, assistant or tool)")),
        }
        if !content.is_empty() {
            out.push(json!({"role": role, "content": content}));
        }
    }
    if !results.is_empty() {
        out.push(json!({"role": "user", "content": results}));
    }
    Ok(out)
}

fn field<'a>(block: &'a Value, key: &str, at: &str) -> Result<&'a str, String> {
    block.get(key).and_then(Value::as_str).ok_or(format!("{at}.{key} must be a string"))
}

/// The non-empty texts of the text blocks, in order.
fn texts<'a>(blocks: &'a [Value], at: &str) -> Result<Vec<&'a str>, String> {
    let mut out = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        if block.get("type").and_then(Value::as_str) == Some("text") {
            let text = field(block, "text", &format!("{at}.content[{j}]"))?;
            if !text.is_empty() {
                out.push(text);
            }
        }
    }
    Ok(out)
}

fn tools(list: &[Value]) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (i, tool) in list.iter().enumerate() {
        let at = format!("tools[{i}]");
        let mut schema = match tool.get("parameters") {
            None | Some(Value::Null) => Map::new(),
            Some(Value::Object(s)) => s.clone(),
            Some(_) => return Err(format!("{at}.parameters must be a JSON Schema object")),
        };
        schema.entry("type").or_insert_with(|| "object".into());
        let mut t = json!({"name": field(tool, "name", &at)?, "input_schema": schema});
        if let Some(d) = tool.get("description").and_then(Value::as_str).filter(|d| !d.is_empty()) {
            t["description"] = d.into();
        }
        out.push(t);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn translation() {
        let req = json!({
            "model": "claude-old", "max_tokens": 64, "system": "sys", "prompt_cache_key": "k", "continuation_id": "c",
            "params": {"tool_choice": {"type": "auto"}, "stream": true, "model": "no"},
            "tools": [{"name": "files", "description": "fs", "parameters": {}}],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "hi"},
                    {"type": "image", "source": {"media_type": "image/png", "data": "AA"}}]},
                {"role": "assistant", "produced_by": {"driver": "d", "model": "m"}, "content": [
                    {"type": "thinking", "text": "t", "signature": "s"}, {"type": "text", "text": "ok"},
                    {"type": "tool_call", "id": "tu1", "name": "files", "input": {"op": "list"}},
                    {"type": "tool_call", "id": "tu2", "name": "files"}]},
                {"role": "tool", "tool_call_id": "tu1", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
                {"role": "tool", "tool_call_id": "tu2", "is_error": true, "content": []},
                {"role": "user", "content": "next"}
            ]
        });
        assert_eq!(
            translate(&req).unwrap(),
            json!({
                "model": "claude-old", "max_tokens": 64, "system": "sys", "stream": false,
                "tool_choice": {"type": "auto"},
                "tools": [{"name": "files", "description": "fs", "input_schema": {"type": "object"}}],
                "messages": [
                    {"role": "user", "content": [{"type": "text", "text": "hi"}]},
                    {"role": "assistant", "content": [{"type": "text", "text": "ok"},
                        {"type": "tool_use", "id": "tu1", "name": "files", "input": {"op": "list"}},
                        {"type": "tool_use", "id": "tu2", "name": "files", "input": {}}]},
                    {"role": "user", "content": [
                        {"type": "tool_result", "tool_use_id": "tu1", "is_error": false, "content": "a\nb"},
                        {"type": "tool_result", "tool_use_id": "tu2", "is_error": true}]},
                    {"role": "user", "content": [{"type": "text", "text": "next"}]}
                ]
            })
        );
    }

    #[test]
    fn errors_name_the_field() {
        assert!(translate(&json!({"max_tokens": 1, "messages": []})).unwrap_err().contains("`model`"));
        assert!(translate(&json!({"model": "m", "messages": []})).unwrap_err().contains("`max_tokens`"));
        let e = translate(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "tool"}]})).unwrap_err();
        assert!(e.contains("messages[0]") && e.contains("tool_call_id"), "{e}");
        let e = translate(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "x"}]})).unwrap_err();
        assert!(e.contains("unknown role"), "{e}");
    }
}
