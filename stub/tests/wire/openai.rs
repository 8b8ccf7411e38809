//! The OpenAI Chat Completions format.

use capsule_stub::{Script, StreamError, Stub, ToolCall, Turn, Usage};
use serde_json::json;

use crate::client::post;

#[tokio::test]
async fn streaming_with_include_usage_ends_with_a_usage_chunk_then_done() {
    let mut script = Script::new(vec![Turn {
        text: Some("Bonjour à tous".into()),
        usage: Some(Usage { input_tokens: Some(12), output_tokens: Some(3), cached_tokens: Some(8) }),
        ..Turn::default()
    }]);
    script.chunk_chars = 5;
    let stub = Stub::start(script).expect("the stub starts");

    let reply = post(
        stub.addr(),
        "/v1/chat/completions",
        r#"{"model":"gpt-test","stream":true,"stream_options":{"include_usage":true},"messages":[]}"#,
    )
    .await;

    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert!(reply.complete);
    let events = reply.events();
    assert!(events.iter().all(|(name, _)| name.is_none()), "OpenAI events are unnamed");
    assert_eq!(events.last().map(|(_, d)| d.as_str()), Some("[DONE]"));
    assert_eq!(reply.chunks.len(), events.len());

    let chunks = reply.event_json();
    assert!(chunks.iter().all(|c| c["object"] == "chat.completion.chunk" && c["model"] == "gpt-test"));
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    let text: String = chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).collect();
    assert_eq!(text, "Bonjour à tous");
    let pieces: Vec<&str> =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["content"].as_str()).filter(|p| !p.is_empty()).collect();
    assert_eq!(pieces, ["Bonjo", "ur à ", "tous"]);

    let finish = &chunks[chunks.len() - 2];
    assert_eq!(finish["choices"][0]["finish_reason"], "stop");
    assert_eq!(finish["usage"], serde_json::Value::Null);
    let usage = chunks.last().expect("a usage chunk");
    assert_eq!(usage["choices"], json!([]));
    assert_eq!(
        usage["usage"],
        json!({"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15,
               "prompt_tokens_details": {"cached_tokens": 8}})
    );
}

#[tokio::test]
async fn without_include_usage_there_is_no_usage_chunk() {
    let stub = Stub::start(Script::new(vec![Turn::text("x")])).expect("the stub starts");

    let reply = post(stub.addr(), "/chat/completions", r#"{"model":"m","stream":true}"#).await;

    let chunks = reply.event_json();
    assert!(chunks.iter().all(|c| c.get("usage").is_none()));
    assert!(chunks.iter().all(|c| c["choices"].as_array().is_some_and(|a| a.len() == 1)));
    assert_eq!(reply.events().last().map(|(_, d)| d.clone()), Some("[DONE]".into()));
}

#[tokio::test]
async fn tool_call_arguments_stream_after_a_first_piece_with_id_and_name() {
    let input = json!({"query": "weather in Zürich", "days": 3});
    let mut script = Script::new(vec![
        Turn::tool_call("first", json!({})),
        Turn {
            tool_calls: Some(vec![
                ToolCall { id: None, name: "search".into(), input: input.clone() },
                ToolCall { id: Some("call_given".into()), name: "other".into(), input: json!([1]) },
            ]),
            ..Turn::default()
        },
    ]);
    script.delta_bytes = 7;
    let stub = Stub::start(script).expect("the stub starts");
    let body = r#"{"model":"m","stream":true}"#;
    let _first = post(stub.addr(), "/v1/chat/completions", body).await;

    let chunks = post(stub.addr(), "/v1/chat/completions", body).await.event_json();

    let calls: Vec<&serde_json::Value> =
        chunks.iter().filter_map(|c| c["choices"][0]["delta"]["tool_calls"].get(0)).collect();
    assert_eq!(
        calls[0],
        &json!({"index": 0, "id": "call_stub_2", "type": "function",
                "function": {"name": "search", "arguments": ""}})
    );
    let arguments: String = calls
        .iter()
        .filter(|c| c["index"] == 0)
        .skip(1)
        .map(|c| {
            assert!(c.get("id").is_none() && c["function"].get("name").is_none());
            c["function"]["arguments"].as_str().expect("an arguments fragment")
        })
        .collect();
    let parsed: serde_json::Value = serde_json::from_str(&arguments).expect("arguments are JSON");
    assert_eq!(parsed, input);
    let second = calls.iter().find(|c| c["index"] == 1).expect("the second call");
    assert_eq!(second["id"], "call_given");
    let finish = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str()).expect("a finish reason");
    assert_eq!(finish, "tool_calls");
}

#[tokio::test]
async fn a_request_without_stream_gets_one_chat_completion() {
    let script = Script::new(vec![Turn::text("plain answer"), Turn::tool_call("lookup", json!({"k": "v"}))]);
    let stub = Stub::start(script).expect("the stub starts");

    let first = post(stub.addr(), "/v1/chat/completions", r#"{"model":"m2"}"#).await.json();
    let second = post(stub.addr(), "/v1/chat/completions", r#"{"model":"m2"}"#).await.json();

    assert_eq!(first["object"], "chat.completion");
    assert_eq!(first["model"], "m2");
    assert_eq!(
        first["choices"][0],
        json!({"index": 0, "message": {"role": "assistant", "content": "plain answer"},
               "finish_reason": "stop"})
    );
    assert_eq!(first["usage"]["prompt_tokens"], 10);
    assert_eq!(second["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(second["choices"][0]["message"]["content"], serde_json::Value::Null);
    assert_eq!(
        second["choices"][0]["message"]["tool_calls"],
        json!([{"id": "call_stub_1", "type": "function",
                "function": {"name": "lookup", "arguments": "{\"k\":\"v\"}"}}])
    );
}

#[tokio::test]
async fn a_stream_error_is_a_data_error_chunk_with_no_done_after_it() {
    let script = Script::new(vec![Turn {
        text: Some("half".into()),
        stream_error: Some(StreamError { kind: "server_error".into(), message: "boom".into() }),
        ..Turn::default()
    }]);
    let stub = Stub::start(script).expect("the stub starts");

    let reply = post(stub.addr(), "/chat/completions", r#"{"stream":true}"#).await;

    let events = reply.events();
    let last: serde_json::Value = serde_json::from_str(&events.last().expect("events").1).expect("JSON");
    assert_eq!(last["error"]["message"], "boom");
    assert_eq!(last["error"]["type"], "server_error");
    assert!(!events.iter().any(|(_, d)| d == "[DONE]"));
}
