//! The Value-based translation this driver used before the one-pass
//! rewrite (issue #16), kept verbatim for the differential tests in
//! [`super::tests`]: the new translation must produce the same body (as
//! parsed JSON) and the same errors. Test-only; never built into the
//! component.

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
