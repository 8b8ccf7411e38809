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

#[test]
fn full_translation() {
    let req = json!({
        "model": "claude-x", "max_tokens": 100, "system": "be brief",
        "prompt_cache_key": "cap:1", "continuation_id": "c1",
        "params": {"temperature": 0.5, "model": "ignored", "tool_choice": {"type": "auto"}},
        "tools": [{"name": "files", "parameters": {}}, {"name": "t2", "description": "d",
                   "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "weird"},
                {"type": "image", "source": {"media_type": "image/png", "data": "AAA"}}]},
            {"role": "assistant", "produced_by": {"driver": "d", "model": "m"}, "content": [
                {"type": "thinking", "text": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "calling"},
                {"type": "tool_call", "id": "tc1", "name": "files", "input": {"op": "list"}},
                {"type": "tool_call", "id": "tc2", "name": "t2", "input": {}}]},
            {"role": "tool", "tool_call_id": "tc1", "content": [{"type": "text", "text": "a\nb"}]},
            {"role": "tool", "tool_call_id": "tc2", "is_error": true, "content": [{"type": "text", "text": "boom"}]},
            {"role": "user", "content": [{"type": "text", "text": "next"}]}
        ]
    });
    let body = run(&req).unwrap();
    let expected = json!({
        "model": "claude-x", "max_tokens": 100, "system": "be brief", "stream": true,
        "temperature": 0.5, "tool_choice": {"type": "auto"},
        "tools": [{"name": "files", "input_schema": {"type": "object"}},
                  {"name": "t2", "description": "d", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}}],
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "hi"},
                {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAA"}}]},
            {"role": "assistant", "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig"},
                {"type": "redacted_thinking", "data": "opaque"},
                {"type": "text", "text": "calling"},
                {"type": "tool_use", "id": "tc1", "name": "files", "input": {"op": "list"}},
                {"type": "tool_use", "id": "tc2", "name": "t2", "input": {}}]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "tc1", "is_error": false, "content": [{"type": "text", "text": "a\nb"}]},
                {"type": "tool_result", "tool_use_id": "tc2", "is_error": true, "content": [{"type": "text", "text": "boom"}]}]},
            {"role": "user", "content": [{"type": "text", "text": "next"}]}
        ]
    });
    assert_eq!(body, expected);
}

#[test]
fn empty_system_and_tools_are_omitted() {
    let body = run(&json!({"model": "m", "max_tokens": 1, "system": "", "tools": [], "messages": []})).unwrap();
    assert_eq!(body, json!({"model": "m", "max_tokens": 1, "messages": [], "stream": true}));
}

#[test]
fn errors_name_the_field() {
    let e = run(&json!({"max_tokens": 1, "messages": []})).unwrap_err();
    assert!(e.contains("`model`"), "{e}");
    let e = run(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "tool", "content": []}]})).unwrap_err();
    assert!(e.contains("messages[0]") && e.contains("tool_call_id"), "{e}");
    let e = run(&json!({"model": "m", "max_tokens": 1, "messages": [{"role": "system", "content": []}]})).unwrap_err();
    assert!(e.contains("unknown role"), "{e}");
}

#[test]
fn tool_inputs_held_in_strings_are_unwrapped() {
    let data = r#"{"model":"m","max_tokens":1,"messages":[{"role":"assistant","content":[
        {"type":"tool_call","id":"a","name":"n","input":"{\"a\":1,\"b\":\"\u00e9\"}"},
        {"type":"tool_call","id":"b","name":"n","input":"not json"},
        {"type":"tool_call","id":"c","name":"n","input":"[1]"},
        {"type":"tool_call","id":"d","name":"n","input":null},
        {"type":"tool_call","id":"e","name":"n"},
        {"type":"tool_call","id":"f","name":"n","input":" {} "}]}]}"#;
    let body = new(data).unwrap();
    let inputs: Vec<&Value> = body["messages"][0]["content"].as_array().unwrap().iter().map(|b| &b["input"]).collect();
    assert_eq!(
        inputs,
        [&json!({"a": 1, "b": "\u{e9}"}), &json!("not json"), &json!("[1]"), &json!({}), &json!({}), &json!({})]
    );
}

#[test]
fn texts_are_copied_verbatim() {
    let data = r#"{"model":"m","max_tokens":1,"messages":[{"role":"user","content":[{"type":"text","text":"a \"q\" \\ \u00e9\n"}]}]}"#;
    let body = String::from_utf8(translate(&Input::parse(data).unwrap()).unwrap()).unwrap();
    assert!(body.contains(r#"{"type":"text","text":"a \"q\" \\ \u00e9\n"}"#), "{body}");
}

#[test]
fn bodies_match_the_old_translation() {
    differential::bodies_match(&new, &old, |body| body);
}

#[test]
fn errors_match_the_old_translation() {
    differential::errors_match(&new, &old);
}

/// Requests made of the shared requests' messages, tools and params in
/// pseudo-random order and number, old and new compared.
#[test]
fn shuffled_conversations_match_the_old_translation() {
    differential::shuffled_match(&new, &old);
}
