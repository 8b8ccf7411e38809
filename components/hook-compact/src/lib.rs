//! Compaction hook `hook-compact` (world `hook`; binding `on-compaction`, commit policy
//! `replace-context`).
//!
//! When the runtime says the context is nearly full, this hook:
//! 1. keeps the newest part as it is: a user message that ends the history (the task just
//!    given), or else the last tool exchange (the last assistant message that asks for tool
//!    calls, and the tool results after it, so every call issued is still answered);
//! 2. summarises everything before it with one `run-inference` call through the capsule's
//!    primary driver choice (the event's `model` and `system-prompt` when the manifest sets
//!    them, else the primary model and the prompt below);
//! 3. returns `replace-context`: one user message holding the summary, then the kept exchange.
//!
//! Every other event is answered `none`. A failed summary is an error, which the runtime
//! reports as a failed compaction.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/hook@0.1.0",
    generate_all,
});

use exports::murmur::hook::lifecycle::{
    CompactionEvent, Guest, HookOutput, InferenceEvent, Message, SessionContext, SessionEndEvent, ShellEvent,
    StageEvent, TaskEndEvent, TaskStartEvent, ToolEvent,
};
use murmur::hook::lifecycle::Message as Said;
use murmur::runtime::inference::{InferenceRequest, run_inference};
use serde_json::Value;

struct Component;

const DEFAULT_PROMPT: &str = "You compress conversations. Summarise the conversation you are given so that the \
assistant can continue the task from the summary alone: keep the task, every decision, every fact learned from \
tools, file names and numbers, and what remains to do. Write plain prose, no preamble.";

/// The readable text of one message, for the transcript handed to the summariser.
fn readable(m: &Message) -> String {
    let parsed: Value = serde_json::from_str(&m.content).unwrap_or(Value::String(m.content.clone()));
    if m.role == "tool" {
        let body = parsed.get("body").cloned().unwrap_or(parsed);
        return format!("tool result: {}", blocks_text(&body));
    }
    format!("{}: {}", m.role, blocks_text(&parsed))
}

fn blocks_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .filter_map(|b| match b.get("type").and_then(Value::as_str) {
                Some("text") => b.get("text").and_then(Value::as_str).map(str::to_string),
                Some("tool_call") => Some(format!(
                    "[calls tool {} with {}]",
                    b.get("name").and_then(Value::as_str).unwrap_or("?"),
                    b.get("input").map(Value::to_string).unwrap_or_default()
                )),
                _ => None,
            })
            .collect::<Vec<_>>()
            .join(" "),
        other => other.to_string(),
    }
}

fn asks_for_tools(m: &Message) -> bool {
    m.role == "assistant"
        && serde_json::from_str::<Value>(&m.content)
            .ok()
            .and_then(|v| v.as_array().cloned())
            .is_some_and(|blocks| blocks.iter().any(|b| b.get("type").and_then(Value::as_str) == Some("tool_call")))
}

/// Where the kept tail starts: a user message that ends the history; else the last assistant
/// message asking for tools when only tool results follow it; else the end (nothing kept).
fn tail_start(messages: &[Message]) -> usize {
    if messages.last().is_some_and(|m| m.role == "user") {
        return messages.len() - 1;
    }
    match messages.iter().rposition(asks_for_tools) {
        Some(i) if messages[i + 1..].iter().all(|m| m.role == "tool") => i,
        _ => messages.len(),
    }
}

fn compact(event: CompactionEvent) -> Result<HookOutput, String> {
    let split = tail_start(&event.messages);
    if split == 0 {
        return Ok(HookOutput::None);
    }
    let transcript: Vec<String> = event.messages[..split].iter().map(readable).collect();
    let request = InferenceRequest {
        messages: vec![Said { role: "user".into(), content: transcript.join("\n\n") }],
        system_prompt: Some(event.system_prompt.unwrap_or_else(|| DEFAULT_PROMPT.to_string())),
        model: event.model,
    };
    let summary = run_inference(&request)?.text;
    let text = format!("[Summary of the conversation so far]\n{summary}");
    let mut kept = vec![Message { role: "user".into(), content: Value::String(text).to_string() }];
    kept.extend(event.messages[split..].iter().cloned());
    Ok(HookOutput::ReplaceContext(kept))
}

impl Guest for Component {
    fn on_stage(_: StageEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_session_start(_: SessionContext) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_task_start(_: TaskStartEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_inference(_: InferenceEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_tool_call(_: ToolEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_shell(_: ShellEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_compaction(event: CompactionEvent) -> Result<HookOutput, String> {
        compact(event)
    }
    fn on_task_end(_: TaskEndEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_session_end(_: SessionEndEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
}

export!(Component);
