//! The official A2A Python SDK (`a2a-sdk`, pinned in tests/a2a/requirements.txt) against a real
//! capsule, its door with bearer authentication, and the provider stub, once over the v1.0
//! transport and once over v0.3. `tests/a2a/sdk_client.py` runs the steps and reports what the
//! SDK returned; this file scripts the stub in the same order and says what is right.

use crate::common::*;
use crate::python::a2a_python;
use capsule_actors::door;
use capsule_stub::{ToolCall, Turn};
use serde_json::{Value, json};
use std::time::Duration;

/// `n` numbered 8-character pieces, streamed one per stub event.
fn numbered(n: usize) -> String {
    (0..n).map(|i| format!("piece{i:03}")).collect()
}

/// Apply stream results in order as a client does: a task replaces everything, an artifact
/// update without `append` replaces that artifact's parts, one with `append` adds to them.
/// Returns artifact id → joined text, in first-seen order.
fn fold(events: &[Value]) -> Vec<(String, String)> {
    let mut arts: Vec<(String, Vec<Value>)> = Vec::new();
    for e in events {
        if let Some(task) = e.get("task") {
            arts = task["artifacts"]
                .as_array()
                .map(|a| {
                    a.iter()
                        .map(|x| {
                            (
                                x["artifact_id"].as_str().unwrap_or("").to_string(),
                                x["parts"].as_array().cloned().unwrap_or_default(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
        } else if let Some(u) = e.get("artifact_update") {
            let id = u["artifact"]["artifact_id"].as_str().unwrap_or("").to_string();
            let parts = u["artifact"]["parts"].as_array().cloned().unwrap_or_default();
            match arts.iter_mut().find(|(a, _)| *a == id) {
                Some((_, held)) if u["append"] == true => held.extend(parts),
                Some((_, held)) => *held = parts,
                None => arts.push((id, parts)),
            }
        }
    }
    arts.into_iter()
        .map(|(id, parts)| (id, parts.iter().filter_map(|p| p["text"].as_str()).collect::<String>()))
        .collect()
}

/// The text of every Anthropic `tool_result` block in a request body.
fn tool_results(body: &Value) -> Vec<String> {
    let blocks =
        body["messages"].as_array().into_iter().flatten().flat_map(|m| m["content"].as_array().into_iter().flatten());
    blocks
        .filter(|b| b["type"] == "tool_result")
        .map(|b| match &b["content"] {
            Value::String(s) => s.clone(),
            Value::Array(parts) => parts.iter().filter_map(|p| p["text"].as_str()).collect(),
            _ => String::new(),
        })
        .collect()
}

fn last_state(events: &[Value]) -> &str {
    events.last().and_then(|e| e["status_update"]["status"]["state"].as_str()).unwrap_or("none")
}

async fn run_sdk(version: &str) -> Value {
    let python = a2a_python();
    let write = ToolCall {
        id: Some("call_1".into()),
        name: "files".into(),
        input: json!({"op": "write", "path": "note.txt", "content": "hi"}),
    };
    let stub = stub(vec![
        Turn::text("hello from the capsule"),
        Turn { text: Some("let me write it".into()), tool_calls: Some(vec![write]), ..Default::default() },
        Turn::text("the note is written"),
        Turn { event_interval_ms: Some(10), ..Turn::text(numbered(200)) },
        Turn { event_interval_ms: Some(20), ..Turn::text(numbered(100)) },
        Turn::tool_call("ask", json!({"prompt": "which branch?"})),
        Turn::text("going with main"),
    ]);
    let tools = [("files", "{ARTIFACTS}/files"), ("ask", "{DIST}/tool-ask.wasm")];
    let cap = anthropic_capsule(&stub.url(), &tools, "network: {authentication: bearer}\n");
    // A token from an earlier start of the same capsule: expired once that session ended.
    let earlier = cap.launch().await.expect("first launch");
    let expired =
        std::fs::read_to_string(earlier.door_auth.as_ref().expect("auth").token_file.as_ref().expect("minted here"))
            .expect("token");
    earlier.shutdown().await;

    let session = std::sync::Arc::new(cap.launch().await.expect("launch"));
    let token =
        std::fs::read_to_string(session.door_auth.as_ref().expect("auth").token_file.as_ref().expect("minted here"))
            .expect("token");
    assert_ne!(token, expired, "each start mints a new token");
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let script = repo().join("tests/a2a/sdk_client.py");
    let run = tokio::process::Command::new(&python)
        .arg(&script)
        .args([&d.url(), version, token.trim(), expired.trim()])
        .kill_on_drop(true)
        .output();
    let out =
        tokio::time::timeout(Duration::from_secs(180), run).await.expect("the SDK run ends").expect("python runs");
    assert!(out.status.success(), "sdk_client.py failed:\n{}", String::from_utf8_lossy(&out.stderr));
    let mut report: Value = serde_json::from_slice(&out.stdout).expect("the report is JSON");
    // What the model got back from the asking tool: the person's answer.
    let last = stub.requests().last().map(|r| r.body.clone()).unwrap_or_default();
    report["model_saw_answer"] = json!(tool_results(&last).iter().any(|c| c == "main"));
    let dir = session.dir.clone();
    session.shutdown().await;
    for file in ["trace.jsonl", "frames.jsonl", "conversation.jsonl"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        assert!(!text.contains(token.trim()), "the token is in no journal file ({file})");
    }
    report
}

fn check(version: &str, r: &Value) {
    let (completed, canceled) = ("TASK_STATE_COMPLETED", "TASK_STATE_CANCELED");
    // The card: both interfaces at /a2a, and the bearer scheme the auth interceptor uses.
    let ifaces = r["card"]["interfaces"].as_array().expect("interfaces");
    for v in ["1.0", "0.3"] {
        assert!(
            ifaces.iter().any(|i| i[0].as_str().is_some_and(|u| u.ends_with("/a2a")) && i[1] == "JSONRPC" && i[2] == v),
            "{v} interface: {ifaces:?}"
        );
    }
    assert_eq!((r["card"]["schemes"].clone(), r["card"]["bearer"].clone()), (json!(["bearer"]), json!("bearer")));
    let transport = if version == "1.0" { "JsonRpcTransport" } else { "CompatJsonRpcTransport" };
    assert_eq!(r["transport"], transport, "the SDK chose the {version} transport");

    // Send: one task, completed, the reply as its status message and its artifact.
    let send = r["send"].as_array().expect("send");
    assert_eq!(send.len(), 1, "{send:?}");
    assert_eq!(send[0]["task"]["status"]["state"], completed);
    assert_eq!(send[0]["task"]["status"]["message"]["parts"][0]["text"], "hello from the capsule");
    assert_eq!(send[0]["task"]["artifacts"][0]["parts"][0]["text"], "hello from the capsule");

    // Stream: the task first, the tool call as an artifact (started, then its result as the last
    // chunk), each turn's text as its own artifact, the final status last.
    let stream = r["stream"].as_array().expect("stream");
    assert!(stream[0].get("task").is_some(), "the task comes first: {:?}", stream[0]);
    let task_id = stream[0]["task"]["id"].as_str().expect("id");
    assert_eq!(last_state(stream), completed);
    let tool: Vec<&Value> = stream.iter().filter(|e| e["artifact_update"]["artifact"]["name"] == "files").collect();
    assert_eq!(tool.len(), 2, "started + result: {stream:?}");
    assert_eq!(tool[0]["artifact_update"]["artifact"]["parts"][0]["data"]["state"], "started");
    assert_eq!(tool[1]["artifact_update"]["append"], true);
    assert_eq!(tool[1]["artifact_update"]["last_chunk"], true);
    assert_eq!(tool[1]["artifact_update"]["artifact"]["parts"][0]["data"]["isError"], false);
    let texts: Vec<String> = fold(stream).into_iter().filter(|(id, _)| id.contains("-text-")).map(|(_, t)| t).collect();
    assert_eq!(texts, vec!["let me write it", "the note is written"]);

    // Get.
    assert_eq!((r["get"]["id"].as_str(), r["get"]["status"]["state"].as_str()), (Some(task_id), Some(completed)));

    // List (v1.0): newest first, paged.
    if version == "1.0" {
        let list = &r["list"];
        assert_eq!(list["tasks"].as_array().map(Vec::len), Some(1), "{list}");
        assert_eq!(list["tasks"][0]["id"], task_id, "newest first");
        assert_eq!((list["total_size"].clone(), list["next_page_token"].clone()), (json!(2), json!("1")));
        assert_eq!(r["list_too_big"]["type"], "InvalidParamsError", "{}", r["list_too_big"]);
    }

    // Cancel mid-stream: the answer and the stream's end say canceled; a second cancel is refused.
    assert_eq!(r["cancel"]["status"]["state"], canceled);
    assert_eq!(last_state(r["canceled_stream"].as_array().expect("events")), canceled);
    assert_eq!(r["cancel_again"]["type"], "TaskNotCancelableError", "{}", r["cancel_again"]);

    // Cut after three chunks, subscribe again: applying both streams in order gives every
    // chunk exactly once.
    let cut = r["cut"].as_array().expect("cut");
    let again = r["resubscribed"].as_array().expect("resubscribed");
    assert!(again[0].get("task").is_some(), "the subscription starts with the task: {:?}", again[0]);
    assert_eq!(last_state(again), completed);
    let all: Vec<Value> = cut.iter().chain(again.iter()).cloned().collect();
    let text: Vec<(String, String)> = fold(&all);
    assert_eq!(text.len(), 1, "one text artifact: {text:?}");
    assert_eq!(text[0].1, numbered(100), "nothing lost or repeated");

    // input-required: the stream stops at the question; the answer on the same task finishes it.
    let asking = r["asking"].as_array().expect("asking");
    assert_eq!(last_state(asking), "TASK_STATE_INPUT_REQUIRED", "{asking:?}");
    let question = &asking.last().expect("event")["status_update"]["status"]["message"]["parts"][0]["text"];
    assert_eq!(question, "which branch?");
    let answered = r["answered"].as_array().expect("answered");
    assert_eq!(answered[0]["task"]["id"], asking[0]["task"]["id"], "the same task goes on");
    assert_eq!(last_state(answered), completed, "{answered:?}");
    let reply = &answered.last().expect("event")["status_update"]["status"]["message"]["parts"][0]["text"];
    assert_eq!(reply, "going with main");
    assert_eq!(r["model_saw_answer"], true, "the tool returned the person's answer to the model");

    assert_eq!(r["unknown"]["type"], "TaskNotFoundError", "{}", r["unknown"]);
    for what in ["missing", "wrong", "expired"] {
        let refused = &r["refused"][what];
        assert!(refused["text"].as_str().is_some_and(|t| t.contains("401")), "{what} token: {refused}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_python_sdk_over_v1_0_sends_streams_lists_cancels_resubscribes_and_is_refused_without_the_token() {
    let report = run_sdk("1.0").await;
    check("1.0", &report);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_a2a_python_sdk_over_v0_3_sends_streams_cancels_resubscribes_and_is_refused_without_the_token() {
    let report = run_sdk("0.3").await;
    check("0.3", &report);
}
