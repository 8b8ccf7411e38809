//! The agent loop's rules (CONTRACT §9): turns, tool dispatch in order, an undeclared tool goes
//! back as an error result, max_turns, the files a session leaves, and frame order per task.

use crate::common::*;
use capsule_protocol::frame::{Frame, TaskState};
use capsule_protocol::trace::ExitStatus;
use capsule_stub::{ToolCall, Turn};
use serde_json::json;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_undeclared_tool_goes_back_to_the_model_as_an_error_and_the_task_goes_on() {
    let stub = stub(vec![Turn::tool_call("nope", json!({})), Turn::text("fine")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "x").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok);
    let body = &stub.requests()[1].body;
    let last = body["messages"].as_array().expect("messages").last().expect("last").clone();
    assert_eq!(last["content"][0]["is_error"], true);
    assert!(last["content"][0]["content"].to_string().contains("not declared"), "{last}");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_that_never_stops_calling_tools_ends_max_turns_reached() {
    let stub = stub(vec![
        Turn::tool_call("nope", json!({})),
        Turn::tool_call("nope", json!({})),
        Turn::tool_call("nope", json!({})),
    ]);
    let cap = anthropic_capsule(&stub.url(), &[], "  max_turns: 2\n");
    let session = cap.launch().await.expect("launch");
    let (outcome, frames) = run_task(&session, "x").await;
    assert_eq!(outcome.exit_status, ExitStatus::MaxTurnsReached, "{}", outcome.message);
    assert!(
        outcome.message.starts_with("E-RUN-070: the task used all 2 turns (inference.max_turns) without a final reply"),
        "one code, its own, with what to do: {}",
        outcome.message
    );
    assert_eq!(stub.requests().len(), 2, "exactly max_turns calls were made");
    let finals = frames.iter().filter(|f| matches!(f.frame, Frame::Status { is_final: true, .. })).count();
    assert_eq!(finals, 1);
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tool_calls_run_in_order_and_frames_follow_the_per_task_order() {
    let calls = vec![
        ToolCall {
            id: Some("c1".into()),
            name: "files".into(),
            input: json!({"op": "write", "path": "n.txt", "content": "1"}),
        },
        ToolCall { id: Some("c2".into()), name: "files".into(), input: json!({"op": "read", "path": "n.txt"}) },
    ];
    let stub = stub(vec![
        Turn { text: Some("working".into()), tool_calls: Some(calls), ..Default::default() },
        Turn::text("all done"),
    ]);
    let cap = anthropic_capsule(&stub.url(), &[("files", "{ARTIFACTS}/files")], "");
    let session = cap.launch().await.expect("launch");
    let (outcome, frames) = run_task(&session, "x").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok);
    let ids: Vec<u64> = frames.iter().filter_map(|f| f.id).collect();
    assert!(ids.windows(2).all(|w| w[1] > w[0]), "ids strictly increase: {ids:?}");
    let kinds: Vec<&str> = frames.iter().map(|f| f.frame.event_name()).collect();
    let first_working = kinds.iter().position(|k| *k == "status").expect("working");
    let started = kinds.iter().position(|k| *k == "tool-call-started").expect("started");
    let first_artifact = kinds.iter().position(|k| *k == "artifact").expect("artifact");
    let text_final =
        frames.iter().position(|f| matches!(f.frame, Frame::Text { is_final: true, .. })).expect("text final");
    assert!(first_working < started && started < text_final && text_final < first_artifact, "{kinds:?}");
    let progress_before: Vec<usize> =
        kinds.iter().enumerate().filter(|(_, k)| **k == "tool-call-progress").map(|(i, _)| i).collect();
    assert!(progress_before.iter().all(|i| *i < first_artifact), "progress precedes artifacts: {kinds:?}");
    let arts: Vec<_> = frames
        .iter()
        .filter_map(
            |f| if let Frame::Artifact { artifact, .. } = &f.frame { artifact.tool_call_id.clone() } else { None },
        )
        .collect();
    assert_eq!(arts, vec!["c1".to_string(), "c2".to_string()]);
    // The second turn's status comes after the first turn's results and before its own text
    // (the results' frames are held until their write is acknowledged, and the call behind
    // them sends only after they reached the emitter).
    let turn2 = frames
        .iter()
        .position(|f| matches!(&f.frame, Frame::Status { status, .. } if status.message == "inference turn 2"))
        .expect("turn 2 status");
    let last_artifact = kinds.iter().rposition(|k| *k == "artifact").expect("artifact");
    let answer = frames
        .iter()
        .position(
            |f| matches!(&f.frame, Frame::Text { text, .. } if !text.is_empty() && "all done".contains(text.as_str())),
        )
        .expect("the answer's text");
    assert!(last_artifact < turn2 && turn2 < answer, "{kinds:?}");
    match &frames.last().expect("last").frame {
        Frame::Status { status, is_final: true, .. } => {
            assert_eq!(status.state, TaskState::Completed);
            assert_eq!(status.response.as_deref(), Some("all done"));
        }
        other => panic!("last frame is not the final status: {other:?}"),
    }
    let dir = session.dir.clone();
    session.shutdown().await;
    let record: Vec<serde_json::Value> = std::fs::read_to_string(dir.join("conversation.jsonl"))
        .expect("record")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let roles: Vec<&str> = record.iter().map(|m| m["role"].as_str().unwrap_or("")).collect();
    assert_eq!(roles, vec!["user", "assistant", "tool", "tool", "assistant"]);
    let events: Vec<String> = std::fs::read_to_string(dir.join("trace.jsonl"))
        .expect("trace")
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).expect("json")["event_type"].as_str().unwrap_or("").to_string()
        })
        .collect();
    for e in ["session_start", "task_start", "inference", "tool_call", "task_end", "session_end"] {
        assert!(events.iter().any(|x| x == e), "trace lacks {e}: {events:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_continuation_sends_only_the_tail_and_a_dropped_one_resends_everything() {
    let cap = Capsule::new(
        "name: cont\nartifacts:\n  - {name: d, runtime: driver, source: '{DIST}/driver-stateful.wasm'}\ninference: {model: m, driver: {artifact: d}}\n",
    );
    let session = cap.launch().await.expect("launch");
    let reply = |s: &'static str| {
        let session = &session;
        async move { session.submit(s).await.expect("outcome").message }
    };
    assert_eq!(reply("hello").await, "messages=1 continuation=none", "the first call is a full send");
    assert_eq!(reply("again").await, "messages=1 continuation=cont-1", "only the new user message plus the id");
    // A tool round: the tool result is the tail of the next call.
    assert_eq!(reply("tool please").await, "messages=1 continuation=cont-3");
    assert_eq!(reply("forget it").await, "messages=1 continuation=cont-4", "the call that drops the id still used it");
    // The empty id was dropped: the next call resends the whole conversation.
    let whole = reply("after").await;
    assert_eq!(
        whole, "messages=11 continuation=none",
        "4 tasks of user+assistant, the tool round's extra assistant+tool, and this user message"
    );
    session.shutdown().await;
}

fn rate_limited(status: u16, retry_after: Option<u64>) -> Turn {
    Turn {
        http_error: Some(capsule_stub::HttpError {
            status,
            body: r#"{"type":"error","error":{"type":"overloaded_error","message":"busy"}}"#.into(),
            retry_after,
        }),
        ..Turn::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_429_or_5xx_is_sent_again_after_its_retry_after_or_a_backoff_each_time_admitted_and_traced() {
    let stub = stub(vec![rate_limited(503, None), rate_limited(429, Some(0)), Turn::text("third time lucky")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "try hard").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    assert_eq!(outcome.message, "third time lucky");
    assert_eq!(stub.requests().len(), 3, "two retries");
    let t = trace(&session);
    let retries: Vec<_> = t.iter().filter(|e| e["event_type"] == "inference_retry").collect();
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!((retries[0]["status"].as_u64(), retries[0]["delay_ms"].as_u64()), (Some(503), Some(500)));
    assert_eq!(
        (retries[1]["status"].as_u64(), retries[1]["delay_ms"].as_u64()),
        (Some(429), Some(0)),
        "retry-after wins"
    );
    let spend: Vec<String> = std::fs::read_to_string(session.dir.join("spend.jsonl"))
        .expect("spend journal")
        .lines()
        .filter(|l| l.contains("\"k\":\"reserve\""))
        .map(str::to_string)
        .collect();
    assert_eq!(spend.len(), 3, "every attempt was admitted: {spend:?}");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retries_stop_at_max_retries_and_a_long_retry_after_is_not_waited_for() {
    let stub = stub(vec![rate_limited(429, None), rate_limited(429, Some(3600)), Turn::text("never reached")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let yaml = std::fs::read_to_string(cap.path().join("murmur.yaml")).expect("manifest");
    std::fs::write(
        cap.path().join("murmur.yaml"),
        yaml.replace("model: claude-test", "model: claude-test\n  max_retries: 1"),
    )
    .expect("manifest");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "try").await;
    assert_eq!(outcome.exit_status, ExitStatus::Failed);
    assert!(outcome.message.contains("429"), "the provider's error reaches the client: {}", outcome.message);
    assert_eq!(stub.requests().len(), 2, "one retry, then the limit");
    session.shutdown().await;
    // A retry-after longer than the longest wait ends the call at once.
    let stub = crate::common::stub(vec![rate_limited(429, Some(3600)), Turn::text("never reached")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "try").await;
    assert_eq!(outcome.exit_status, ExitStatus::Failed);
    assert_eq!(stub.requests().len(), 1);
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_tool_result_reaches_the_model_whole_but_frames_and_trace_carry_a_prefix_and_name_its_file() {
    let stub = stub(vec![Turn::tool_call("files", json!({"op": "read", "path": "big.txt"})), Turn::text("read it")]);
    let cap = anthropic_capsule(&stub.url(), &[("files", "{DIST}/tool-files.wasm")], "");
    let big = "0123456789abcdef".repeat(3 * 1024 * 1024 / 16); // 3 MiB
    std::fs::create_dir_all(cap.workdir.join("files")).expect("mkdir");
    std::fs::write(cap.workdir.join("files/big.txt"), &big).expect("big file");
    let session = cap.launch().await.expect("launch");
    // Thirty watchers that never read: each holds what it is sent (the old cost was the whole
    // result per watcher).
    let mut watchers = Vec::new();
    for _ in 0..30 {
        watchers.push(session.subscribe(None).await.expect("subscribe"));
    }
    let (outcome, frames) = run_task(&session, "read the big file").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    let art = frames
        .iter()
        .find_map(|f| match &f.frame {
            Frame::Artifact { artifact, .. } => Some(artifact.clone()),
            _ => None,
        })
        .expect("artifact frame");
    let shown = art.content.expect("content");
    assert!(shown.len() <= capsule_protocol::frame::ARTIFACT_FRAME_BYTES && big.starts_with(&shown[..100]));
    assert_eq!(art.truncated, Some(true));
    let file = art.output_file.expect("the frame names the file");
    assert_eq!(std::fs::read_to_string(session.dir.join(&file)).expect("output file"), big, "kept whole");
    // The model got all of it.
    let sent = &stub.requests()[1].body;
    let tool_result = sent["messages"].as_array().expect("messages").last().expect("last").to_string();
    assert!(tool_result.len() > big.len(), "the provider received the whole result");
    let t = trace(&session);
    let call = t.iter().find(|e| e["event_type"] == "tool_call").expect("tool_call");
    assert!(call["content"].as_str().expect("content").len() <= capsule_protocol::frame::ARTIFACT_FRAME_BYTES);
    assert_eq!(call["content_bytes"].as_u64(), Some(big.len() as u64));
    // What each idle watcher holds is bounded by the frame cap, not by the result's size.
    for mut w in watchers {
        let mut held = 0;
        while let Ok(f) = w.try_recv() {
            held += f.to_json_line().to_string().len();
        }
        assert!(held < 2 * capsule_protocol::frame::ARTIFACT_FRAME_BYTES, "a watcher holds {held} bytes");
    }
    session.shutdown().await;
}

/// A bare `.wasm` tool says nothing of its input: the model is offered any object, never `{}`
/// (which real providers refuse).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bare_component_tool_is_offered_an_object_schema() {
    let stub = stub(vec![Turn::text("done")]);
    let cap = anthropic_capsule(&stub.url(), &[("spin", "{DIST}/guest-spin-forever.wasm")], "");
    let session = cap.launch().await.expect("launch");
    session.submit("hi").await.expect("outcome");
    let body = &stub.requests()[0].body;
    let spin = body["tools"].as_array().expect("tools").iter().find(|t| t["name"] == "spin").expect("spin offered");
    assert_eq!(spin["input_schema"], serde_json::json!({"type": "object"}), "{spin}");
    session.shutdown().await;
}
