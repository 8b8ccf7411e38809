//! Test driver `driver-stateful` (world `driver`): stands in for a provider that keeps the
//! conversation on its side, so the host's continuation plumbing (CONTRACT §3) can be tested
//! without a real provider of that kind.
//!
//! On every call it answers, as text, what it received: `messages=<n> continuation=<id|none>`,
//! and returns `metadata continuation_id = cont-<n+1>` where `<n>` is the number it got in the
//! request (0 when none). When the last user message says `forget`, it returns an empty
//! `continuation_id`, which tells the host to drop it. When the last message is a user message
//! saying `tool`, it asks for a call to the undeclared tool `nothing`, so the host's next call
//! carries a tool result in the tail. When it says `echo`, the text also names what this call
//! was given per driver choice: ` model=<m> max_tokens=<n> config=<MURMUR_INFERENCE_DRIVER_CONFIG
//! or none> driver=<MURMUR_INFERENCE_DRIVER>`.
//!
//! It makes no HTTP request and emits no events. Deliberately not a real driver.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/driver@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use serde_json::{Value, json};

struct Component;

fn last_user_text(messages: &[Value]) -> Option<String> {
    let last = messages.last()?;
    if last["role"] != "user" {
        return None;
    }
    Some(last["content"].as_array()?.iter().filter_map(|b| b["text"].as_str()).collect())
}

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        let request: Value = input.data.as_deref().and_then(|d| serde_json::from_str(d).ok()).unwrap_or(Value::Null);
        let messages = request["messages"].as_array().cloned().unwrap_or_default();
        let held = request["continuation_id"].as_str().map(str::to_string);
        let n = held.as_deref().and_then(|c| c.strip_prefix("cont-")).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        let said = last_user_text(&messages).unwrap_or_default();
        let mut text = format!("messages={} continuation={}", messages.len(), held.as_deref().unwrap_or("none"));
        if said.contains("echo") {
            let var = |k: &str| std::env::var(k).unwrap_or_else(|_| "none".into());
            text.push_str(&format!(
                " model={} max_tokens={} config={} driver={}",
                request["model"].as_str().unwrap_or("?"),
                request["max_tokens"],
                var("MURMUR_INFERENCE_DRIVER_CONFIG"),
                var("MURMUR_INFERENCE_DRIVER"),
            ));
        }
        let next = if said.contains("forget") { String::new() } else { format!("cont-{}", n + 1) };
        let (stop, content) = if said.contains("tool") {
            (
                "tool_call",
                json!([{"type": "text", "text": text}, {"type": "tool_call", "id": format!("call-{}", n + 1), "name": "nothing", "input": {}}]),
            )
        } else {
            ("end_turn", json!([{"type": "text", "text": text}]))
        };
        let response =
            json!({"stop_reason": stop, "content": content, "usage": {"input_tokens": 1, "output_tokens": 1}});
        ToolResult {
            status: Status::Passed,
            summary: None,
            data: Some(response.to_string()),
            data_path: None,
            truncated: false,
            metadata: vec![("continuation_id".to_string(), next)],
        }
    }
}

export!(Component);
