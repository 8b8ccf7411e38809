//! The conversation as hooks see it: `message {role, content}` pairs, as Murmur hands them.
//!
//! - A user or assistant message's `content` is its content blocks as a JSON array string.
//! - A tool message's `content` is a JSON object `{"__murmur_tool_msg__": true, "tool_call_id",
//!   "is_error", "body"}` (`body`: its blocks), so a hook that keeps it as it is keeps its call id.
//!
//! Back from a hook: a tool message is kept only when that wrapper came back intact (else its
//! call id is unknown and the next request would be refused); any other message's content is
//! read as a block array, a JSON string, or plain text.

use capsule_protocol::neutral::{Block, Message, Role};
use serde_json::{Value, json};

/// The key of the tool-message wrapper.
pub const TOOL_MARKER: &str = "__murmur_tool_msg__";

fn role_name(r: Role) -> &'static str {
    match r {
        Role::User => "user",
        Role::Assistant => "assistant",
        Role::Tool => "tool",
    }
}

/// The history as a hook gets it.
pub fn to_hook(messages: &[Message]) -> Vec<(String, String)> {
    messages
        .iter()
        .map(|m| {
            let blocks = serde_json::to_value(&m.content).unwrap_or(Value::Array(Vec::new()));
            let content = match m.role {
                Role::Tool => {
                    json!({TOOL_MARKER: true, "tool_call_id": m.tool_call_id, "is_error": m.is_error, "body": blocks})
                        .to_string()
                }
                _ => blocks.to_string(),
            };
            (role_name(m.role).to_string(), content)
        })
        .collect()
}

fn blocks(content: &str) -> Vec<Block> {
    match serde_json::from_str::<Value>(content) {
        Ok(v @ Value::Array(_)) => {
            serde_json::from_value(v).unwrap_or_else(|_| vec![Block::Text { text: content.into() }])
        }
        Ok(Value::String(s)) => vec![Block::Text { text: s }],
        _ => vec![Block::Text { text: content.to_string() }],
    }
}

/// The messages a hook handed back, as the runtime keeps them; tool messages whose wrapper did
/// not survive are dropped (the tool-pair check then decides whether the result is usable).
pub fn from_hook(messages: &[(String, String)]) -> Vec<Message> {
    messages
        .iter()
        .filter_map(|(role, content)| {
            let (role, content_blocks, tool_call_id, is_error) = match role.as_str() {
                "tool" => {
                    let v: Value = serde_json::from_str(content).ok()?;
                    if v.get(TOOL_MARKER).and_then(Value::as_bool) != Some(true) {
                        return None;
                    }
                    let id = v.get("tool_call_id")?.as_str().filter(|s| !s.is_empty())?.to_string();
                    let body = v.get("body").cloned().unwrap_or(Value::Array(Vec::new()));
                    let b = serde_json::from_value(body).ok()?;
                    (Role::Tool, b, Some(id), v.get("is_error").and_then(Value::as_bool))
                }
                "assistant" => (Role::Assistant, blocks(content), None, None),
                _ => (Role::User, blocks(content), None, None),
            };
            Some(Message { role, content: content_blocks, tool_call_id, is_error, produced_by: None })
        })
        .collect()
}

/// Whether every tool call issued in `messages` is answered there, and every answer answers
/// one of them.
pub fn pairs_hold(messages: &[Message]) -> bool {
    use std::collections::BTreeSet;
    let issued: BTreeSet<&str> = messages
        .iter()
        .filter(|m| m.role == Role::Assistant)
        .flat_map(|m| m.content.iter())
        .filter_map(|b| if let Block::ToolCall { id, .. } = b { Some(id.as_str()) } else { None })
        .collect();
    let answered: BTreeSet<&str> =
        messages.iter().filter(|m| m.role == Role::Tool).filter_map(|m| m.tool_call_id.as_deref()).collect();
    issued == answered
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(id: &str) -> Message {
        Message {
            role: Role::Assistant,
            content: vec![Block::ToolCall { id: id.into(), name: "t".into(), input: json!({"a": 1}) }],
            tool_call_id: None,
            is_error: None,
            produced_by: None,
        }
    }

    #[test]
    fn a_history_kept_as_it_is_comes_back_the_same_and_a_broken_wrapper_is_dropped() {
        let history =
            vec![Message::user_text("do it"), call("c1"), Message::tool_result("c1", "done", false), call("c2")];
        let round = from_hook(&to_hook(&history));
        assert_eq!(round, history);
        assert!(!pairs_hold(&round), "c2 is not answered");
        assert!(pairs_hold(&round[..3]));
        let mut hooked = to_hook(&history[..3]);
        hooked[2].1 = "a summary of the tool result".into();
        let back = from_hook(&hooked);
        assert_eq!(back.len(), 2, "the tool message without its wrapper is dropped");
        assert!(!pairs_hold(&back), "and then c1 is unanswered");
        let plain = from_hook(&[("user".into(), "\"just a string\"".into()), ("user".into(), "not json".into())]);
        assert_eq!(plain[0].text(), "just a string");
        assert_eq!(plain[1].text(), "not json");
    }
}
