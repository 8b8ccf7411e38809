//! Tool-call progress end to end (CONTRACT §10, seed 001): the real Anthropic driver reads a
//! ~200 KB tool input streamed by the stub in 512-byte `input_json_delta`s spread over more than
//! a second, and a client of the door sees the coalesced frames over a real socket.

use crate::common::*;
use capsule_actors::door;
use capsule_stub::{Script, Stub, Turn};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

// The SSE reader `capsule watch` uses.
#[path = "../../src/sse_client.rs"]
#[allow(dead_code)]
mod sse_client;

const CONTENT_BYTES: usize = 200 * 1024;
const DELTA_BYTES: usize = 512;
const EVENT_INTERVAL_MS: u64 = 3;
/// The coalescer's interval (`capsule_actors::coalescer::PROGRESS_INTERVAL`).
const INTERVAL: Duration = Duration::from_millis(250);

/// One frame as the client received it.
struct Received {
    at: Instant,
    event: String,
    data: Value,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_200_kb_tool_input_streams_as_coalesced_progress_ending_at_its_size_before_the_artifact() {
    let content: String = (0..CONTENT_BYTES).map(|i| char::from(b'a' + u8::try_from(i % 26).expect("small"))).collect();
    let input = json!({"op": "write", "path": "big.txt", "content": content});
    // What the driver counts: the length of the input JSON as it arrives in input_json_delta
    // pieces, which is the stub's compact serialization of `input`.
    let total = u64::try_from(input.to_string().len()).expect("fits");
    let call = Turn { event_interval_ms: Some(EVENT_INTERVAL_MS), ..Turn::tool_call("files", input) };
    let stub = Stub::start(Script { delta_bytes: DELTA_BYTES, ..Script::new(vec![call, Turn::text("written")]) })
        .expect("stub");
    let cap = anthropic_capsule(&stub.url(), &[("files", "{ARTIFACTS}/files")], "");
    let session = Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");

    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": {"messageId": "m1", "role": "user", "parts": [{"text": "write big.txt"}]}}});
    let mut resp = reqwest::Client::new()
        .post(d.url())
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let mut parser = sse_client::SseParser::new();
    let mut frames: Vec<Received> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    'read: loop {
        let chunk = tokio::time::timeout_at(deadline, resp.chunk())
            .await
            .expect("the task ends within 60 s")
            .expect("the stream reads");
        let Some(chunk) = chunk else { break };
        let at = Instant::now();
        for ev in parser.push(&chunk) {
            let data: Value = serde_json::from_str(&ev.data).expect("data is JSON");
            let done = ev.event == "status" && data["final"] == true;
            frames.push(Received { at, event: ev.event, data });
            if done {
                break 'read;
            }
        }
    }
    let last = frames.last().expect("frames");
    assert_eq!((last.event.as_str(), &last.data["status"]["state"]), ("status", &json!("completed")), "{}", last.data);

    let started: Vec<&Received> = frames.iter().filter(|f| f.event == "tool-call-started").collect();
    assert_eq!(started.len(), 1, "exactly one tool-call-started");
    assert_eq!(started[0].data["tool_name"], "files");
    let call_id = started[0].data["tool_call_id"].as_str().expect("call id").to_string();

    let progress: Vec<(usize, &Received)> =
        frames.iter().enumerate().filter(|(_, f)| f.event == "tool-call-progress").collect();
    assert!(progress.iter().all(|(_, f)| f.data["tool_call_id"] == call_id.as_str()), "progress frames name the call");
    let sizes: Vec<u64> = progress.iter().map(|(_, f)| f.data["input_bytes"].as_u64().expect("input_bytes")).collect();
    assert!(sizes.windows(2).all(|w| w[1] > w[0]), "sizes strictly increase: {sizes:?}");
    assert_eq!(sizes.last(), Some(&total), "the last progress frame is the whole input: {sizes:?}");

    // The bound. The coalescer writes the first report at once and each later non-flush frame
    // at least 250 ms after the previous one, all within the stretch of time the reports arrive
    // in, D; so there are at most floor(D / 250 ms) + 1 of them, plus one flush when the call
    // completes. D is at most the stub's own answer time (request arrival to the last event
    // handed over) plus delivery jitter; the first-to-last progress arrival at this client
    // covers the case where the driver lags the stub (it ends at the flush). The larger of the
    // two is used, so jitter can only loosen the check, never fail it.
    let answer = Duration::from_nanos(u64::try_from(stub.requests()[0].stub_elapsed_ns).expect("fits"));
    let (first_at, last_at) = (progress[0].1.at, progress[progress.len() - 1].1.at);
    let stream_duration = answer.max(last_at - first_at);
    assert!(
        answer >= Duration::from_secs(1),
        "the stub spread the input over {answer:?}; the 250 ms rule needs more than a second"
    );
    let bound = usize::try_from(stream_duration.as_millis() / INTERVAL.as_millis()).expect("fits") + 2;
    assert!(
        sizes.len() <= bound,
        "{} progress frames over {stream_duration:?}: at most {bound} (one per 250 ms plus the flush): {sizes:?}",
        sizes.len()
    );
    assert!(
        sizes.len() >= 3,
        "over {stream_duration:?} there is a first frame, at least one timed frame and the last: {sizes:?}"
    );

    let artifact = frames
        .iter()
        .position(|f| f.event == "artifact" && f.data["artifact"]["tool_call_id"] == call_id.as_str())
        .expect("the call's artifact");
    let last_progress = progress[progress.len() - 1].0;
    assert!(
        last_progress < artifact,
        "the last progress frame (#{last_progress}) comes before the artifact (#{artifact})"
    );
    assert_eq!(frames[artifact].data["artifact"]["is_error"], false, "{}", frames[artifact].data);
    let written = std::fs::read_to_string(session.files.join("big.txt")).expect("big.txt written");
    assert_eq!(written.len(), CONTENT_BYTES, "the tool got the whole input");
}

/// Seed 001 `clear_writing`: a stream cut in the middle of a tool call's input leaves that call
/// as it was: its first progress frame, nothing flushed after, no artifact; the task fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_in_the_middle_of_a_tool_calls_input_flushes_nothing_for_that_call() {
    let input = json!({"op": "write", "path": "never.txt", "content": "z".repeat(20_000)});
    let call = Turn { cut_after_events: Some(40), ..Turn::tool_call("files", input) };
    let stub = Stub::start(Script { delta_bytes: 64, ..Script::new(vec![call]) }).expect("stub");
    let cap = anthropic_capsule(&stub.url(), &[("files", "{ARTIFACTS}/files")], "");
    let session = cap.launch().await.expect("launch");
    let mut rx = session.subscribe(None).await.expect("subscribe");
    let outcome = session.submit("write it").await.expect("outcome");
    assert_eq!(outcome.exit_status, capsule_protocol::trace::ExitStatus::Failed, "{}", outcome.message);
    let mut frames = Vec::new();
    while let Ok(Some(f)) = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await {
        let done = matches!(&f.frame, capsule_protocol::frame::Frame::Status { is_final: true, .. });
        frames.push(f.frame.clone());
        if done {
            break;
        }
    }
    use capsule_protocol::frame::Frame;
    let started = frames.iter().filter(|f| matches!(f, Frame::ToolCallStarted { .. })).count();
    let progress: Vec<u64> = frames
        .iter()
        .filter_map(|f| if let Frame::ToolCallProgress { input_bytes, .. } = f { Some(*input_bytes) } else { None })
        .collect();
    assert_eq!(started, 1, "the call was started: {frames:?}");
    assert_eq!(progress.len(), 1, "only the first report, written at once; no flush of what was held: {progress:?}");
    assert!(!frames.iter().any(|f| matches!(f, Frame::Artifact { .. })), "no artifact for a call that never completed");
    assert!(!session.files.join("never.txt").exists(), "the tool never ran");
    session.shutdown().await;
}
