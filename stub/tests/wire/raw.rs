//! Raw turns: recorded responses replayed byte for byte, whole or in frames of `chunk_bytes`.

use capsule_stub::{RawResponse, Script, Stub, StubError, Turn};

use crate::client::post;

const STREAM: &str = r#"{"model":"m","stream":true}"#;

/// A body whose bytes include two- three- and four-byte characters.
const RECORDED: &str = "event: content_block_delta\ndata: {\"text\":\"é日本😀\"}\n\n";

#[tokio::test]
async fn a_raw_body_is_sent_whole_byte_for_byte_with_the_default_status_and_type() {
    let stub = Stub::start(Script::new(vec![
        Turn::raw(RawResponse::body(RECORDED)),
        Turn::raw(RawResponse::body("data: [DONE]\n\n")),
    ]))
    .expect("the stub starts");

    let anthropic = post(stub.addr(), "/v1/messages", STREAM).await;
    let openai = post(stub.addr(), "/v1/chat/completions", STREAM).await;

    assert_eq!(anthropic.status, 200);
    assert_eq!(anthropic.header("content-type"), Some("text/event-stream"));
    assert_eq!(
        anthropic.header("content-length"),
        Some(RECORDED.len().to_string().as_str()),
        "a body without chunk_bytes goes out whole"
    );
    assert_eq!(anthropic.body, RECORDED.as_bytes());
    assert!(anthropic.complete);
    assert_eq!(openai.body, b"data: [DONE]\n\n");
    assert_eq!(stub.requests().len(), 2);
}

#[tokio::test]
async fn chunk_bytes_streams_one_frame_per_piece_even_when_a_piece_ends_inside_a_character() {
    let mut raw = RawResponse::body(RECORDED);
    raw.chunk_bytes = Some(7);
    let stub = Stub::start(Script::new(vec![Turn::raw(raw)])).expect("the stub starts");

    let reply = post(stub.addr(), "/v1/messages", STREAM).await;

    assert_eq!(reply.status, 200);
    assert!(reply.complete, "a raw stream ends properly");
    let expected: Vec<Vec<u8>> = RECORDED.as_bytes().chunks(7).map(<[u8]>::to_vec).collect();
    assert_eq!(reply.chunks, expected, "each piece is its own frame on the wire");
    assert!(
        reply.chunks.iter().any(|c| std::str::from_utf8(c).is_err()),
        "some frame ends inside a multi-byte character"
    );
    assert_eq!(reply.body, RECORDED.as_bytes());
    assert!(stub.requests()[0].stub_elapsed_ns > 0);
}

#[tokio::test]
async fn a_relative_body_file_is_read_from_the_script_folder_with_its_status_and_type() {
    let dir = std::env::temp_dir().join(format!("capsule-stub-raw-{}", std::process::id()));
    std::fs::create_dir_all(dir.join("cases")).expect("a temp dir");
    let body = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
    std::fs::write(dir.join("cases/overloaded.json"), body).expect("written");
    std::fs::write(
        dir.join("script.yaml"),
        "turns:\n  - raw: {status: 529, content_type: application/json, body_file: cases/overloaded.json, chunk_bytes: 10}\n",
    )
    .expect("written");

    let script = Script::load(&dir.join("script.yaml")).expect("the script loads");
    let stub = Stub::start(script).expect("the stub starts");
    let reply = post(stub.addr(), "/v1/messages", STREAM).await;

    assert_eq!(reply.status, 529);
    assert_eq!(reply.header("content-type"), Some("application/json"));
    assert_eq!(reply.text(), body);
    assert_eq!(reply.chunks.len(), body.len().div_ceil(10));
    std::fs::remove_dir_all(&dir).expect("cleaned up");
}

#[tokio::test]
async fn a_missing_body_file_is_a_start_error_naming_the_turn_and_the_file() {
    let script = Script::new(vec![Turn::text("fine"), Turn::raw(RawResponse::file("/nonexistent/recorded.sse"))]);

    let error = Stub::start(script).expect_err("the file is read at start");

    assert!(matches!(error, StubError::ReadRawBody { turn: 1, .. }), "{error:?}");
    assert!(error.to_string().contains("/nonexistent/recorded.sse"), "{error}");
}

#[tokio::test]
async fn a_raw_turn_with_both_body_sources_or_neither_is_refused_at_start() {
    let mut both = RawResponse::body("x");
    both.body_file = Some("x.sse".into());
    let mut neither = RawResponse::body("x");
    neither.body = None;

    for (raw, says) in [(both, "both"), (neither, "neither")] {
        let error = Stub::start(Script::new(vec![Turn::raw(raw)])).expect_err("refused");
        assert!(matches!(error, StubError::InvalidScript { .. }), "{error:?}");
        assert!(error.to_string().contains(says), "{error}");
    }
}
