//! The Anthropic Messages format.

use capsule_stub::{Script, StreamError, Stub, Thinking, ToolCall, Turn};
use serde_json::json;

use crate::client::post;

const STREAM: &str =
    r#"{"model":"claude-test","max_tokens":100,"stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

fn names(reply: &crate::client::Reply) -> Vec<String> {
    reply.events().into_iter().map(|(name, _)| name.expect("every Anthropic event is named")).collect()
}

#[tokio::test]
async fn streaming_text_arrives_as_chunk_sized_text_deltas_one_event_per_frame() {
    let mut script = Script::new(vec![Turn::text("Hello, world!")]);
    script.chunk_chars = 4;
    let stub = Stub::start(script).expect("the stub starts");

    let reply = post(stub.addr(), "/v1/messages", STREAM).await;

    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert!(reply.complete);
    assert_eq!(
        names(&reply),
        [
            "message_start",
            "ping",
            "content_block_start",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_delta",
            "content_block_stop",
            "message_delta",
            "message_stop",
        ]
    );
    // Really streamed: each SSE event is its own frame on the wire.
    assert_eq!(reply.chunks.len(), reply.events().len());
    for (name, data) in reply.events() {
        let value: serde_json::Value = serde_json::from_str(&data).expect("data is JSON");
        assert_eq!(value["type"], json!(name), "the data type matches the event name");
    }
    let events = reply.event_json();
    assert_eq!(events[0]["message"]["model"], "claude-test");
    assert_eq!(events[0]["message"]["usage"]["input_tokens"], 10);
    let deltas: Vec<&str> = events
        .iter()
        .filter(|e| e["type"] == "content_block_delta")
        .map(|e| e["delta"]["text"].as_str().expect("a text delta"))
        .collect();
    assert_eq!(deltas, ["Hell", "o, w", "orld", "!"]);
    assert_eq!(events[8]["delta"]["stop_reason"], "end_turn");
    assert_eq!(events[8]["usage"]["output_tokens"], 4);
}

#[tokio::test]
async fn tool_call_input_json_deltas_reassemble_to_the_scripted_input() {
    let input = json!({"path": "notes/café.md", "lines": [1, 2, 3], "note": "日本語"});
    let mut script = Script::new(vec![Turn {
        text: Some("Reading.".into()),
        tool_calls: Some(vec![
            ToolCall { id: None, name: "read_file".into(), input: input.clone() },
            ToolCall { id: Some("toolu_given".into()), name: "noop".into(), input: json!({}) },
        ]),
        ..Turn::default()
    }]);
    script.delta_bytes = 5;
    let stub = Stub::start(script).expect("the stub starts");

    let events = post(stub.addr(), "/v1/messages", STREAM).await.event_json();

    let starts: Vec<&serde_json::Value> = events.iter().filter(|e| e["type"] == "content_block_start").collect();
    assert_eq!(starts[0]["content_block"], json!({"type": "text", "text": ""}));
    assert_eq!(
        starts[1]["content_block"],
        json!({"type": "tool_use", "id": "toolu_stub_1", "name": "read_file", "input": {}})
    );
    assert_eq!(starts[1]["index"], 1);
    assert_eq!(starts[2]["content_block"]["id"], "toolu_given");
    let pieces: Vec<&str> = events
        .iter()
        .filter(|e| e["index"] == 1 && e["delta"]["type"] == "input_json_delta")
        .map(|e| e["delta"]["partial_json"].as_str().expect("a JSON piece"))
        .collect();
    assert!(pieces.len() > 1);
    assert!(pieces.iter().all(|p| p.len() <= 5 || p.chars().count() == 1));
    let joined: serde_json::Value = serde_json::from_str(&pieces.concat()).expect("the pieces join to JSON");
    assert_eq!(joined, input);
    let delta = events.iter().find(|e| e["type"] == "message_delta").expect("a message_delta");
    assert_eq!(delta["delta"]["stop_reason"], "tool_use");
}

#[tokio::test]
async fn thinking_streams_first_as_thinking_deltas_then_one_signature_delta() {
    let script = Script::new(vec![Turn {
        thinking: Some(Thinking { text: "Let me think hard.".into(), signature: "sig-123".into() }),
        text: Some("Done.".into()),
        ..Turn::default()
    }]);
    let stub = Stub::start(script).expect("the stub starts");

    let events = post(stub.addr(), "/v1/messages", STREAM).await.event_json();

    let first_block: Vec<&serde_json::Value> = events.iter().filter(|e| e["index"] == 0).collect();
    assert_eq!(first_block[0]["content_block"]["type"], "thinking");
    let thinking: String = first_block
        .iter()
        .filter(|e| e["delta"]["type"] == "thinking_delta")
        .map(|e| e["delta"]["thinking"].as_str().expect("thinking text"))
        .collect();
    assert_eq!(thinking, "Let me think hard.");
    let last_delta = first_block.iter().rev().find(|e| e["type"] == "content_block_delta").expect("deltas");
    assert_eq!(last_delta["delta"], json!({"type": "signature_delta", "signature": "sig-123"}));
    assert!(events.iter().any(|e| e["index"] == 1 && e["delta"]["text"] == "Done."));
}

#[tokio::test]
async fn a_request_without_stream_gets_one_message_object() {
    let script = Script::new(vec![Turn {
        text: Some("Hi there".into()),
        tool_calls: Some(vec![ToolCall { id: None, name: "t".into(), input: json!({"a": 1}) }]),
        usage: Some(capsule_stub::Usage { input_tokens: Some(42), output_tokens: Some(7), cached_tokens: Some(30) }),
        ..Turn::default()
    }]);
    let stub = Stub::start(script).expect("the stub starts");

    let reply = post(stub.addr(), "/v1/messages", r#"{"model":"m1","messages":[]}"#).await;

    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let message = reply.json();
    assert_eq!(message["type"], "message");
    assert_eq!(message["role"], "assistant");
    assert_eq!(message["model"], "m1");
    assert_eq!(
        message["content"],
        json!([
            {"type": "text", "text": "Hi there"},
            {"type": "tool_use", "id": "toolu_stub_1", "name": "t", "input": {"a": 1}},
        ])
    );
    assert_eq!(message["stop_reason"], "tool_use");
    assert_eq!(message["usage"]["input_tokens"], 42);
    assert_eq!(message["usage"]["output_tokens"], 7);
    assert_eq!(message["usage"]["cache_read_input_tokens"], 30);
}

#[tokio::test]
async fn a_stream_error_follows_the_text_and_nothing_follows_it() {
    let script = Script::new(vec![Turn {
        text: Some("partial".into()),
        stream_error: Some(StreamError { kind: "overloaded_error".into(), message: "Overloaded".into() }),
        ..Turn::default()
    }]);
    let stub = Stub::start(script).expect("the stub starts");

    let reply = post(stub.addr(), "/v1/messages", STREAM).await;

    let events = reply.events();
    let (name, data) = events.last().expect("events");
    assert_eq!(name.as_deref(), Some("error"));
    let data: serde_json::Value = serde_json::from_str(data).expect("JSON");
    assert_eq!(data, json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}));
    assert!(events.iter().any(|(_, d)| d.contains("\"partial\"")));
    assert!(!events.iter().any(|(n, _)| n.as_deref() == Some("message_stop")));
}
