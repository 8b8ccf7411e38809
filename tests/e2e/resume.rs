//! `kill -9` in the middle of a task, then `capsule run --resume`: tool calls whose results are
//! journaled are not run again, a call that was running is reported as interrupted, an
//! in-flight provider call is re-issued, frame ids continue with no gap, and the conversation
//! record has nothing lost or duplicated.

use crate::common::*;
use capsule_stub::{Script, Stub, ToolCall, Turn};
use serde_json::{Value, json};
use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn capsule_cmd(args: &[&str], cap: &Capsule) -> Child {
    Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(args)
        .args(["--json", "--keyless", "--workdir"])
        .arg(&cap.workdir)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("capsule runs")
}

fn ready_dir(child: &mut Child) -> std::path::PathBuf {
    let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready: Value = serde_json::from_str(&lines.next().expect("ready").expect("line")).expect("json");
    std::thread::spawn(move || for _ in lines.by_ref() {});
    std::path::PathBuf::from(ready["session_dir"].as_str().expect("session dir"))
}

fn lines_of(path: &std::path::Path) -> Vec<Value> {
    std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| serde_json::from_str(l).ok()).collect()
}

fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn assert_frames_continue(dir: &std::path::Path) -> u64 {
    let ids: Vec<u64> = lines_of(&dir.join("frames.jsonl")).iter().filter_map(|f| f["id"].as_u64()).collect();
    assert!(!ids.is_empty());
    assert_eq!(
        ids,
        (1..=ids.len() as u64).collect::<Vec<_>>(),
        "frame ids continue across the restart with no gap and no repeat"
    );
    ids.len() as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_tool_call_resumes_without_re_running_finished_calls() {
    let calls = vec![
        ToolCall {
            id: Some("c1".into()),
            name: "files".into(),
            input: json!({"op": "write", "path": "a.txt", "content": "x"}),
        },
        ToolCall { id: Some("c2".into()), name: "spin".into(), input: json!({}) },
    ];
    let stub = Stub::start(Script::new(vec![
        Turn { tool_calls: Some(calls), ..Default::default() },
        Turn::text("finished after resume"),
    ]))
    .expect("stub");
    let cap = anthropic_capsule(
        &stub.url(),
        &[("files", "{ARTIFACTS}/files"), ("spin", "{DIST}/guest-spin-forever.wasm")],
        "capabilities: {limits: {deadline_seconds: 60}}\nlifecycle: {after_task: sleep}\n",
    );
    let url = stub.url();
    let mut first =
        capsule_cmd(&["run", &cap.path().display().to_string(), "--task", "work", "--endpoint", &url], &cap);
    let dir = ready_dir(&mut first);
    wait_for("c2 to start", || {
        lines_of(&dir.join("trace.jsonl"))
            .iter()
            .any(|e| e["event_type"] == "tool_call_started" && e["tool_call_id"] == "c2")
    });
    first.kill().expect("kill -9");
    let _ = first.wait();
    let before = assert_frames_continue(&dir);

    let mut second = capsule_cmd(&["run", "--resume", &dir.display().to_string(), "--endpoint", &url], &cap);
    let _ = ready_dir(&mut second);
    wait_for("the resumed task to end", || {
        lines_of(&dir.join("trace.jsonl")).iter().any(|e| e["event_type"] == "task_end")
    });
    let reqs = stub.requests();
    assert_eq!(reqs.len(), 2, "one call before the kill, one after");
    let msgs = reqs[1].body["messages"].as_array().expect("messages").clone();
    let results: Vec<Value> = msgs
        .iter()
        .flat_map(|m| m["content"].as_array().cloned().unwrap_or_default())
        .filter(|b| b["type"] == "tool_result")
        .collect();
    assert_eq!(results.len(), 2, "{msgs:?}");
    assert_eq!(results[0]["tool_use_id"], "c1");
    assert_ne!(results[0]["is_error"], true);
    assert_eq!(results[1]["tool_use_id"], "c2");
    assert_eq!(results[1]["is_error"], true);
    assert!(results[1].to_string().contains("E-RUN-090"), "the interrupted call is reported as such: {}", results[1]);
    let trace = lines_of(&dir.join("trace.jsonl"));
    let started_c1 =
        trace.iter().filter(|e| e["event_type"] == "tool_call_started" && e["tool_call_id"] == "c1").count();
    assert_eq!(started_c1, 1, "the finished call was not run again");
    assert!(trace.iter().any(|e| e["event_type"] == "session_resumed"));
    assert!(trace.iter().any(|e| e["event_type"] == "task_end" && e["exit_status"] == "ok"));
    let record = lines_of(&dir.join("conversation.jsonl"));
    let roles: Vec<&str> = record.iter().map(|m| m["role"].as_str().unwrap_or("")).collect();
    assert_eq!(roles, vec!["user", "assistant", "tool", "tool", "assistant"], "nothing lost or duplicated");
    let after = assert_frames_continue(&dir);
    assert!(after > before);
    // A client reconnecting with the last id it saw before the kill gets no gap.
    let door = std::fs::read_to_string(dir.join("door.url")).expect("door url");
    let resp = reqwest::Client::new()
        .post(door.trim())
        .header("content-type", "application/json")
        .header("last-event-id", before.to_string())
        .body(json!({"jsonrpc": "2.0", "id": 1, "method": "stream/watch"}).to_string())
        .send()
        .await
        .expect("watch");
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    use futures::StreamExt;
    while !text.contains(&format!("id: {after}\n")) {
        let chunk = tokio::time::timeout(Duration::from_secs(10), body.next())
            .await
            .expect("frames")
            .expect("open")
            .expect("chunk");
        text.push_str(&String::from_utf8_lossy(&chunk));
    }
    assert!(!text.contains("event: gap"), "no gap across the restart");
    assert!(text.contains(&format!("id: {}\n", before + 1)), "replay resumes right after the last id seen");
    let _ = Command::new("kill").args(["-TERM", &second.id().to_string()]).status();
    assert!(second.wait().expect("exit").success());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kill_during_a_provider_stream_re_issues_the_call_on_resume() {
    let slow = Turn { text: Some("y".repeat(400)), event_interval_ms: Some(20), ..Default::default() };
    let stub = Stub::start(Script { chunk_chars: 1, ..Script::new(vec![slow, Turn::text("done after resume")]) })
        .expect("stub");
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let url = stub.url();
    let mut first =
        capsule_cmd(&["run", &cap.path().display().to_string(), "--task", "stream", "--endpoint", &url], &cap);
    let dir = ready_dir(&mut first);
    wait_for("text frames to stream", || {
        lines_of(&dir.join("frames.jsonl")).iter().filter(|f| f["event"] == "text").count() >= 5
    });
    first.kill().expect("kill -9");
    let _ = first.wait();
    let out = Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["run", "--resume", &dir.display().to_string(), "--json", "--keyless", "--endpoint", &url])
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .output()
        .expect("resume runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(stub.requests().len(), 2, "the in-flight call was issued again");
    assert_eq!(std::fs::read_to_string(dir.join("out/result.txt")).expect("result"), "done after resume");
    let roles: Vec<String> = lines_of(&dir.join("conversation.jsonl"))
        .iter()
        .map(|m| m["role"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(roles, vec!["user", "assistant"], "the cut reply was never recorded; the re-issued one was, once");
    assert_frames_continue(&dir);
}

async fn door_call(url: &str, body: Value) -> Value {
    match reqwest::Client::new().post(url).json(&body).send().await {
        Ok(r) => r.json().await.unwrap_or(Value::Null),
        Err(_) => Value::Null,
    }
}

fn door_send(text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"messageId": text, "role": "user", "parts": [{"text": text}]}}})
}

/// A queued task is accepted work: it is journaled before its client hears "queued", so a kill
/// while it waits does not lose it. The resumed session finishes the interrupted task, then
/// runs the queued ones in order, except one its client canceled before the kill.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_queued_before_a_kill_run_after_the_resume_and_a_canceled_one_does_not() {
    let slow = Turn { text: Some("z".repeat(400)), event_interval_ms: Some(20), ..Default::default() };
    let stub = Stub::start(Script {
        chunk_chars: 1,
        ..Script::new(vec![slow, Turn::text("first, again"), Turn::text("q1 done"), Turn::text("q3 done")])
    })
    .expect("stub");
    let cap = anthropic_capsule(&stub.url(), &[], "lifecycle: {task_acceptance: queue, queue_depth: 4}\n");
    let url = stub.url();
    let mut first =
        capsule_cmd(&["run", &cap.path().display().to_string(), "--task", "first", "--endpoint", &url], &cap);
    let dir = ready_dir(&mut first);
    wait_for("the first task to stream", || {
        lines_of(&dir.join("frames.jsonl")).iter().filter(|f| f["event"] == "text").count() >= 3
    });
    let door = std::fs::read_to_string(dir.join("door.url")).expect("door url");
    let mut waiting = Vec::new();
    for text in ["q1", "q2", "q3"] {
        let to = door.clone();
        waiting.push(tokio::spawn(async move { door_call(&to, door_send(text)).await }));
        let queued = |t: &str| {
            lines_of(&dir.join("trace.jsonl")).into_iter().find(|e| e["event_type"] == "task_queued" && e["text"] == t)
        };
        wait_for("the task to be queued", || queued(text).is_some());
        if text == "q2" {
            let id = queued("q2").and_then(|e| e["task_id"].as_str().map(str::to_string)).expect("id");
            let canceled =
                door_call(&door, json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/cancel", "params": {"id": id}}))
                    .await;
            assert_eq!(canceled["result"]["status"]["state"], "canceled", "{canceled}");
        }
    }
    first.kill().expect("kill -9");
    let _ = first.wait();
    for w in waiting {
        let _ = w.await;
    }
    let log = dir.parent().expect("workdir").join("resume.log");
    // No --endpoint and no --keyless: the resume sends where the session did.
    let mut second = Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["run", "--resume", &dir.display().to_string(), "--json"])
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).expect("log"))
        .spawn()
        .expect("resume runs");
    // A queue capsule keeps serving its door after its tasks (`after_task` defaults to `sleep`).
    wait_for("the resumed and recovered tasks to end", || {
        lines_of(&dir.join("trace.jsonl")).iter().filter(|e| e["event_type"] == "task_end").count() == 4
    });
    let _ = Command::new("kill").args(["-TERM", &second.id().to_string()]).status();
    let mut status = None;
    wait_for("the resumed process to exit", || {
        status = second.try_wait().expect("wait");
        status.is_some()
    });
    let log = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(status.is_some_and(|s| s.success()), "{log}");
    let users: Vec<String> = lines_of(&dir.join("conversation.jsonl"))
        .iter()
        .filter(|m| m["role"] == "user")
        .map(|m| m["content"][0]["text"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(users, vec!["first", "q1", "q3"], "the queued tasks ran in order; the canceled one did not");
    let ends: Vec<(String, String)> = lines_of(&dir.join("trace.jsonl"))
        .iter()
        .filter(|e| e["event_type"] == "task_end")
        .map(|e| (e["exit_status"].as_str().unwrap_or("").to_string(), e["task_id"].to_string()))
        .collect();
    assert_eq!(ends.iter().filter(|(s, _)| s == "ok").count(), 3, "{ends:?}");
    assert_eq!(ends.iter().filter(|(s, _)| s == "canceled").count(), 1, "{ends:?}");
    assert_eq!(stub.requests().len(), 4, "the cut call again, then one call per queued task");
    assert_frames_continue(&dir);
}

/// A session that ended with nothing pending is not started again (no second `session_start`
/// and `session_end`), and a folder that is not a session is named as such.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resuming_an_ended_session_writes_nothing_and_a_non_session_folder_is_named() {
    let stub = Stub::start(Script::new(vec![Turn::text("all done")])).expect("stub");
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let url = stub.url();
    let mut first =
        capsule_cmd(&["run", &cap.path().display().to_string(), "--task", "work", "--endpoint", &url], &cap);
    let dir = ready_dir(&mut first);
    assert!(first.wait().expect("exit").success());
    let before = std::fs::read(dir.join("trace.jsonl")).expect("trace");
    let resume = |folder: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_capsule"))
            .args(["run", "--resume", &folder.display().to_string()])
            .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
            .output()
            .expect("resume runs")
    };
    let out = resume(&dir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("ended and has nothing to resume"), "{stderr}");
    assert_eq!(std::fs::read(dir.join("trace.jsonl")).expect("trace"), before, "nothing was written");
    let out = resume(&cap.workdir);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("E-RUN-065") && stderr.contains("is not a session folder"), "{stderr}");
}
