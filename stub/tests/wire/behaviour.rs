//! Failures, turn selection, routing and the request log.

use std::error::Error as _;

use capsule_stub::{Provider, RecordedRequest, Script, Stub, StubError, Turn};
use serde_json::json;

use crate::client::{get, post};

const STREAM: &str = r#"{"model":"m","stream":true}"#;

#[tokio::test]
async fn http_error_answers_with_the_scripted_status_and_body() {
    let body = r#"{"type":"error","error":{"type":"rate_limit_error","message":"slow down"}}"#;
    let stub = Stub::start(Script::new(vec![Turn::http_error(429, body)])).expect("starts");

    let reply = post(stub.addr(), "/v1/messages", STREAM).await;

    assert_eq!(reply.status, 429);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.text(), body);
}

#[tokio::test]
async fn cut_after_events_drops_the_connection_without_message_stop() {
    let stub = Stub::start(Script::new(vec![Turn {
        text: Some("a fairly long answer that streams in many pieces".into()),
        cut_after_events: Some(4),
        ..Turn::default()
    }]))
    .expect("starts");

    let reply = post(stub.addr(), "/v1/messages", STREAM).await;

    assert_eq!(reply.status, 200);
    assert!(!reply.complete, "the chunked body is never terminated");
    let names: Vec<String> = reply.events().into_iter().filter_map(|(n, _)| n).collect();
    assert_eq!(names, ["message_start", "ping", "content_block_start", "content_block_delta"]);
}

#[tokio::test]
async fn a_cut_larger_than_the_stream_still_withholds_the_terminal_event() {
    let stub = Stub::start(Script::new(vec![Turn {
        text: Some("short".into()),
        cut_after_events: Some(1000),
        ..Turn::default()
    }]))
    .expect("starts");

    let reply = post(stub.addr(), "/chat/completions", STREAM).await;

    assert!(!reply.complete);
    let events = reply.events();
    assert!(!events.iter().any(|(_, d)| d == "[DONE]"));
    assert!(events.iter().any(|(_, d)| d.contains("\"finish_reason\":\"stop\"")));
}

#[tokio::test]
async fn garbage_is_sent_raw_as_an_event_stream_then_the_connection_closes() {
    let stub = Stub::start(Script::new(vec![Turn { garbage: Some("data: {not json\n\n".into()), ..Turn::default() }]))
        .expect("starts");

    let reply = post(stub.addr(), "/v1/messages", STREAM).await;

    assert_eq!(reply.status, 200);
    assert_eq!(reply.header("content-type"), Some("text/event-stream"));
    assert_eq!(reply.header("connection"), Some("close"));
    assert_eq!(reply.text(), "data: {not json\n\n");
}

#[tokio::test]
async fn an_exhausted_script_answers_500_naming_the_turn_count() {
    let stub = Stub::start(Script::new(vec![Turn::text("only one")])).expect("starts");
    let _ = post(stub.addr(), "/v1/messages", STREAM).await;

    let reply = post(stub.addr(), "/v1/messages", STREAM).await;

    assert_eq!(reply.status, 500);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    let message = reply.json()["error"]["message"].as_str().expect("an error message").to_owned();
    assert!(message.contains("exhausted"), "{message}");
    assert!(message.contains("1 turn"), "{message}");
    assert_eq!(stub.requests()[1].turn, 1);
}

#[tokio::test]
async fn unknown_paths_get_a_json_404_naming_the_path_and_take_no_turn() {
    let stub = Stub::start(Script::new(vec![Turn::text("kept")])).expect("starts");

    let missing = post(stub.addr(), "/v1/embeddings", "{}").await;
    let wrong_method = get(stub.addr(), "/v1/messages").await;
    let answered = post(stub.addr(), "/v1/messages", r#"{"model":"m"}"#).await;

    assert_eq!(missing.status, 404);
    assert!(missing.text().contains("/v1/embeddings"));
    assert_eq!(wrong_method.status, 405);
    assert_eq!(answered.status, 200);
    assert_eq!(answered.json()["content"][0]["text"], "kept");
    let log = stub.requests();
    assert_eq!(log.len(), 3);
    assert_eq!(log[0].provider, None);
    assert_eq!(log[1].provider, None);
    assert_eq!((log[2].provider, log[2].turn), (Some(Provider::Anthropic), 0));
}

#[tokio::test]
async fn every_request_is_recorded_with_headers_body_turn_and_timing() {
    let stub = Stub::start(Script::new(vec![Turn::text("one"), Turn::text("two")])).expect("starts");
    let first_body = r#"{"model":"m","stream":true,"messages":[{"role":"user","content":"hi"}]}"#;

    let _ = post(stub.addr(), "/v1/messages", first_body).await;
    let _ = post(stub.addr(), "/chat/completions", "not json at all").await;

    let log = stub.requests();
    assert_eq!(log.len(), 2);
    let first = &log[0];
    assert_eq!(first.method, "POST");
    assert_eq!(first.path, "/v1/messages");
    assert_eq!(first.turn, 0);
    assert_eq!(first.provider, Some(Provider::Anthropic));
    assert_eq!(first.body, serde_json::from_str::<serde_json::Value>(first_body).expect("JSON"));
    assert!(first.headers.contains(&("x-test".to_owned(), "yes".to_owned())));
    assert!(first.headers.iter().all(|(n, _)| n == &n.to_ascii_lowercase()));
    assert!(first.received_unix_ns > 0);
    assert!(first.stub_elapsed_ns > 0, "timing is written before the last byte goes out");
    let second = &log[1];
    assert_eq!(second.turn, 1);
    assert_eq!(second.provider, Some(Provider::OpenAi));
    assert_eq!(second.body, json!("not json at all"));
    assert!(log[0].received_unix_ns <= log[1].received_unix_ns);

    let served = get(stub.addr(), "/_stub/requests").await;
    assert_eq!(served.status, 200);
    let over_http: Vec<RecordedRequest> =
        serde_json::from_slice(&served.body).expect("the log is a JSON array of requests");
    assert_eq!(over_http, log);
    assert_eq!(stub.requests().len(), 2, "reading the log is not itself recorded");
}

#[tokio::test]
async fn delay_ms_is_waited_before_answering_and_shows_in_the_elapsed_time() {
    let stub =
        Stub::start(Script::new(vec![Turn { text: Some("late".into()), delay_ms: Some(50), ..Turn::default() }]))
            .expect("starts");

    let reply = post(stub.addr(), "/v1/messages", r#"{"model":"m"}"#).await;

    assert_eq!(reply.status, 200);
    assert!(stub.requests()[0].stub_elapsed_ns >= 50_000_000);
}

#[tokio::test]
async fn a_script_file_that_does_not_parse_is_reported_with_its_name_and_cause() {
    let dir = std::env::temp_dir().join(format!("capsule-stub-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temp dir");
    let path = dir.join("bad-script.yaml");
    std::fs::write(&path, "turns:\n  - text: hi\n    colour: blue\n").expect("written");

    let error = capsule_stub::serve_cli(&path, None).await.expect_err("the script is refused");

    assert!(matches!(error, StubError::ScriptFile { .. }));
    assert!(error.to_string().contains("bad-script.yaml"), "{error}");
    let cause = error.source().expect("the parse problem is kept as the source");
    assert!(cause.source().is_some(), "and the parser's own error below it");
    let missing = capsule_stub::serve_cli(&dir.join("absent.yaml"), None).await.expect_err("a missing file is refused");
    assert!(matches!(missing, StubError::ReadScriptFile { .. }));
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}

#[test]
fn starting_outside_a_tokio_runtime_is_an_error_not_a_panic() {
    let error = Stub::start(Script::default()).expect_err("no runtime");
    assert!(matches!(error, StubError::NoRuntime { .. }));
}

#[tokio::test]
async fn a_cut_non_streaming_answer_sends_headers_but_never_a_complete_body() {
    let stub = Stub::start(Script::new(vec![Turn {
        text: Some("never delivered".into()),
        cut_after_events: Some(2),
        ..Turn::default()
    }]))
    .expect("starts");

    let reply = post(stub.addr(), "/v1/messages", r#"{"model":"m"}"#).await;

    assert_eq!(reply.status, 200);
    assert!(!reply.complete);
    assert!(reply.body.is_empty());
}
