//! Tests of the translation: expected bodies, and the differential tests
//! against the old Value-based translation ([`super::old`]) on the shared
//! requests of `guest-http/testdata/neutral_requests.jsonl` and on
//! conversations shuffled from them.

use super::*;
use serde_json::{Value, json};

use guest_http::differential;

/// The new translation of a request given as text, its body parsed back.
fn new(data: &str) -> Result<Value, String> {
    differential::parsed(data, translate)
}

fn old(data: &str) -> Result<Value, String> {
    old::translate(&serde_json::from_str(data).unwrap())
}

fn run(req: &Value) -> Result<Value, String> {
    new(&req.to_string())
}

/// `arguments` strings that hold JSON replaced by that JSON: the old
/// translation re-serialised a tool input (sorted keys, no spaces, its own
/// escapes), the new one copies it; the provider parses it either way.
fn parsed_arguments(mut body: Result<Value, String>) -> Result<Value, String> {
    if let Ok(body) = &mut body {
        for msg in body["messages"].as_array_mut().into_iter().flatten() {
            for call in msg.get_mut("tool_calls").and_then(Value::as_array_mut).into_iter().flatten() {
                let args = &mut call["function"]["arguments"];
                if let Some(held) = args.as_str().and_then(|a| serde_json::from_str::<Value>(a).ok()) {
                    *args = json!({ "held": held });
                }
            }
        }
    }
    body
}

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
    let body = run(&req).unwrap();
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
    let body = run(&req).unwrap();
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
    let body = run(&req).unwrap();
    assert_eq!(
        body,
        json!({"model": "m", "messages": [], "max_completion_tokens": 7, "stream": true,
                            "stream_options": {"include_usage": true}})
    );
}

#[test]
fn errors_name_the_field() {
    let e = run(&json!({"max_tokens": 1, "messages": []})).unwrap_err();
    assert!(e.contains("`model`"), "{e}");
    let e = run(&json!({"model": "m", "max_tokens": 0, "messages": []})).unwrap_err();
    assert!(e.contains("`max_tokens`"), "{e}");
    let e = run(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": []}]})).unwrap_err();
    assert!(e.contains("messages[0]") && e.contains("tool_call_id"), "{e}");
    let e = run(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": []}]})).unwrap_err();
    assert!(e.contains("unknown role"), "{e}");
    let e = run(&json!({"model": "m", "max_tokens": 1, "messages": [], "params": []})).unwrap_err();
    assert!(e.contains("`params`"), "{e}");
    let e = run(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"media_type": "image/png"}}]}]}))
    .unwrap_err();
    assert!(e.contains("messages[0].content[0].source.data"), "{e}");
}

/// On input as the runtime writes it (compact, sorted keys, serde_json's
/// escapes) even the `arguments` strings are the old ones, byte for byte.
#[test]
fn arguments_of_runtime_input_are_the_old_ones_exactly() {
    let req = json!({"model": "m", "max_tokens": 1, "messages": [{"role": "assistant", "content": [
        {"type": "tool_call", "id": "a", "name": "n", "input": {"z": [1, 2.5, null], "a": "q\"\u{e9}\n\u{1F600}", "m": {}}},
        {"type": "tool_call", "id": "b", "name": "n", "input": "{\"x\": 1}"},
        {"type": "tool_call", "id": "c", "name": "n", "input": "not json \"\u{e9}\""},
        {"type": "tool_call", "id": "d", "name": "n", "input": 5},
        {"type": "tool_call", "id": "e", "name": "n", "input": null}]}]});
    let data = req.to_string();
    assert_eq!(new(&data), old(&data));
}

#[test]
fn bodies_match_the_old_translation() {
    differential::bodies_match(&new, &old, parsed_arguments);
}

#[test]
fn errors_match_the_old_translation() {
    differential::errors_match(&new, &old);
}

/// Requests made of the shared requests' messages, tools and params in
/// pseudo-random order and number, old and new compared (input written by
/// serde_json, as the runtime writes it, so `arguments` compare exactly).
#[test]
fn shuffled_conversations_match_the_old_translation() {
    differential::shuffled_match(&new, &old);
}
