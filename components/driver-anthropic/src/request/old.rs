//! The Value-based translation this driver used before the one-pass
//! rewrite (issue #16), kept verbatim for the differential tests in
//! [`super::tests`]: the new translation must produce the same body (as
//! parsed JSON) and the same errors. Test-only; never built into the
//! component.

use serde_json::{Map, Value, json};

/// Keys of the body this module owns; `params` cannot override them.
const RESERVED: [&str; 6] = ["model", "max_tokens", "system", "messages", "tools", "stream"];

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

    let mut body = Map::new();
    if let Some(params) = req.get("params") {
        match params {
            Value::Null => {}
            Value::Object(params) => {
                for (k, v) in params {
                    if !RESERVED.contains(&k.as_str()) {
                        body.insert(k.clone(), v.clone());
                    }
                }
            }
            _ => return Err("`params` must be an object".into()),
        }
    }
    body.insert("model".into(), Value::String(model));
    body.insert("max_tokens".into(), max_tokens.into());
    match req.get("system") {
        None | Some(Value::Null) => {}
        Some(Value::String(s)) if s.is_empty() => {}
        Some(Value::String(s)) => {
            body.insert("system".into(), Value::String(s.clone()));
        }
        Some(_) => return Err("`system` must be a string".into()),
    }
    let messages = match req.get("messages") {
        Some(Value::Array(m)) => messages(m)?,
        _ => return Err("`messages` must be an array".into()),
    };
    body.insert("messages".into(), Value::Array(messages));
    let tools = match req.get("tools") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(t)) => tools(t)?,
        Some(_) => return Err("`tools` must be an array".into()),
    };
    if !tools.is_empty() {
        body.insert("tools".into(), Value::Array(tools));
    }
    body.insert("stream".into(), Value::Bool(true));
    Ok(Value::Object(body))
}

fn messages(list: &[Value]) -> Result<Vec<Value>, String> {
    let mut out: Vec<Value> = Vec::new();
    // Open `tool_result` blocks waiting to become one user message.
    let mut results: Vec<Value> = Vec::new();
    for (i, msg) in list.iter().enumerate() {
        let at = format!("messages[{i}]");
        let role = msg.get("role").and_then(Value::as_str).ok_or(format!("{at}.role must be a string"))?;
        let blocks = content(msg, &at)?;
        if role == "tool" {
            results.push(tool_result(msg, &blocks, &at)?);
            continue;
        }
        if !results.is_empty() {
            out.push(json!({"role": "user", "content": std::mem::take(&mut results)}));
        }
        let translated = match role {
            "user" => user_blocks(&blocks, &at)?,
            "assistant" => assistant_blocks(&blocks, &at)?,
            other => return Err(format!("{at}.role: unknown role `{other}` (user, assistant or tool)")),
        };
        if !translated.is_empty() {
            out.push(json!({"role": role, "content": translated}));
        }
    }
    if !results.is_empty() {
        out.push(json!({"role": "user", "content": results}));
    }
    Ok(out)
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

/// A non-empty text block, or `None` for an empty one.
fn text(block: &Value, at: &str) -> Result<Option<Value>, String> {
    let text = str_field(block, "text", at)?;
    Ok((!text.is_empty()).then(|| json!({"type": "text", "text": text})))
}

fn image(block: &Value, at: &str) -> Result<Value, String> {
    let source = block.get("source").ok_or(format!("{at}.source is missing"))?;
    let at = format!("{at}.source");
    Ok(json!({
        "type": "image",
        "source": {
            "type": "base64",
            "media_type": str_field(source, "media_type", &at)?,
            "data": str_field(source, "data", &at)?,
        }
    }))
}

fn user_blocks(blocks: &[Value], at: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match block_type(block) {
            "text" => out.extend(text(block, &at)?),
            "image" => out.push(image(block, &at)?),
            _ => {}
        }
    }
    Ok(out)
}

fn assistant_blocks(blocks: &[Value], at: &str) -> Result<Vec<Value>, String> {
    let mut out = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match block_type(block) {
            "text" => out.extend(text(block, &at)?),
            "tool_call" => out.push(json!({
                "type": "tool_use",
                "id": str_field(block, "id", &at)?,
                "name": str_field(block, "name", &at)?,
                "input": tool_input(block.get("input")),
            })),
            "thinking" => {
                let signature = block.get("signature").and_then(Value::as_str).unwrap_or("");
                if !signature.is_empty() {
                    out.push(json!({
                        "type": "thinking",
                        "thinking": str_field(block, "text", &at)?,
                        "signature": signature,
                    }));
                }
            }
            "redacted_thinking" => out.push(json!({
                "type": "redacted_thinking",
                "data": str_field(block, "data", &at)?,
            })),
            _ => {}
        }
    }
    Ok(out)
}

/// A tool call's input as Anthropic wants it: an object. A JSON string
/// holding an object is unwrapped; a missing or null input is `{}`.
fn tool_input(input: Option<&Value>) -> Value {
    match input {
        None | Some(Value::Null) => json!({}),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => Value::String(s.clone()),
        },
        Some(v) => v.clone(),
    }
}

fn tool_result(msg: &Value, blocks: &[Value], at: &str) -> Result<Value, String> {
    let id = msg
        .get("tool_call_id")
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
        .ok_or(format!("{at}: a tool message needs a non-empty `tool_call_id`"))?;
    let is_error = msg.get("is_error").and_then(Value::as_bool).unwrap_or(false);
    let mut parts = Vec::new();
    for (j, block) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{j}]");
        match block_type(block) {
            "text" => parts.extend(text(block, &at)?),
            "image" => parts.push(image(block, &at)?),
            _ => {}
        }
    }
    let mut result = json!({"type": "tool_result", "tool_use_id": id, "is_error": is_error});
    if !parts.is_empty() {
        result["content"] = Value::Array(parts);
    }
    Ok(result)
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
        let mut t = json!({"name": name, "input_schema": schema});
        if let Some(d) = tool.get("description").and_then(Value::as_str).filter(|d| !d.is_empty()) {
            t["description"] = Value::String(d.to_string());
        }
        out.push(t);
    }
    Ok(out)
}
