//! Lifecycle hooks (`murmur:hook/lifecycle@0.5.0`) and compaction, with the real components
//! `hook-probe` (misbehaves on purpose, by its capsule's name) and `hook-compact` (summarises
//! through `run-inference`), the real Anthropic driver and the stub.

use crate::common::*;
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;
use serde_json::{Value, json};

/// A capsule named `name` with the Anthropic driver at `endpoint`, `tool-files` as `files`,
/// each hook as an artifact folder holding `yaml` (Murmur's form) and the component `wasm`,
/// and `extra` YAML after `inference:` (indented two spaces) or at the top level.
pub fn hooked(endpoint: &str, name: &str, hooks: &[(&str, &str, &str)], inference: &str, top: &str) -> Capsule {
    let mut y = format!(
        "name: {name}\nversion: 0.1.0\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: {{DIST}}/driver-anthropic.wasm\n    gateway: {{endpoint: '{endpoint}', keyless: true}}\n  - name: files\n    runtime: tool\n    source: {{DIST}}/tool-files.wasm\n"
    );
    for (hook, _, _) in hooks {
        y.push_str(&format!("  - name: {hook}\n    runtime: hook\n    source: hooks/{hook}\n"));
    }
    y.push_str(&format!("inference:\n  model: claude-test\n  driver: {{artifact: anthropic}}\n{inference}{top}"));
    let cap = Capsule::new(&y);
    for (hook, wasm, own) in hooks {
        hook_folder(&cap, hook, wasm, own);
    }
    cap
}

/// `hooks/<hook>/` in the capsule's folder: the hook's own `murmur.yaml` (`own`) and the
/// component `components/dist/<wasm>.wasm` beside it.
pub fn hook_folder(cap: &Capsule, hook: &str, wasm: &str, own: &str) {
    let dir = cap.path().join("hooks").join(hook);
    std::fs::create_dir_all(&dir).expect("hook folder");
    std::fs::write(dir.join("murmur.yaml"), own).expect("hook manifest");
    std::fs::copy(dist(wasm), dir.join(format!("{wasm}.wasm"))).expect("component");
}

pub fn probe(extra: &str) -> String {
    format!("name: probe\nversion: 0.1.0\nruntime: hook\nrequires_files: [hook-probe.wasm]\n{extra}")
}

pub fn events<'a>(t: &'a [Value], kind: &str) -> Vec<&'a Value> {
    t.iter().filter(|e| e["event_type"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_artifact_hook_output_reaches_an_sse_client_and_the_hook_keeps_its_state() {
    let stub = stub(vec![
        Turn::tool_call("files", json!({"op": "write", "path": "a.txt", "content": "hi"})),
        Turn::text("written"),
    ]);
    let cap = hooked(&stub.url(), "probe-artifact", &[("probe", "hook-probe", &probe(""))], "", "");
    let session = std::sync::Arc::new(cap.launch().await.expect("launch"));
    let door = capsule_actors::door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": {"messageId": "m1", "role": "user", "parts": [{"text": "write it"}]}}});
    let resp = reqwest::Client::new()
        .post(door.url())
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    let raw = resp.text().await.expect("the stream ends with the task");
    let artifacts: Vec<Value> = raw
        .split("\n\n")
        .filter(|b| b.contains("event: artifact"))
        .filter_map(|b| b.lines().find_map(|l| l.strip_prefix("data: ")))
        .map(|d| serde_json::from_str(d).expect("json"))
        .filter(|d: &Value| d["artifact"]["tool_name"] == "probe")
        .collect();
    assert_eq!(artifacts.len(), 2, "one per answered call: {raw}");
    let payloads: Vec<Value> = artifacts
        .iter()
        .map(|a| serde_json::from_str(a["artifact"]["content"].as_str().expect("content")).expect("payload"))
        .collect();
    assert_eq!((payloads[0]["turn"].as_u64(), payloads[0]["decision"].as_str()), (Some(1), Some("tool_call")));
    assert_eq!((payloads[1]["turn"].as_u64(), payloads[1]["decision"].as_str()), (Some(2), Some("final")));
    // session-start, task-start, inference; then tool-call, inference: one instance saw all five.
    assert_eq!((payloads[0]["events_seen"].as_u64(), payloads[1]["events_seen"].as_u64()), (Some(3), Some(5)));
    assert!(raw.contains("\"state\":\"completed\""), "{raw}");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_task_runs_the_task_again_within_its_budget_then_stops() {
    let stub = stub(vec![Turn::text("first"), Turn::text("second"), Turn::text("third")]);
    let hook = probe("commit_policy: reopen-task\n");
    let cap = hooked(&stub.url(), "probe-reopen", &[("probe", "hook-probe", &hook)], "  max_task_reopens: 2\n", "");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "answer").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    assert_eq!(outcome.message, "third", "two reopens, then the third answer stands");
    let requests = stub.requests();
    assert_eq!(requests.len(), 3);
    let last = requests[2].body.to_string();
    assert!(last.contains("check again") && last.contains("first") && last.contains("second"), "{last}");
    let t = trace(&session);
    let reopened = events(&t, "task_reopened");
    let refused: Vec<bool> = reopened.iter().map(|e| e["refused"].as_bool().expect("refused")).collect();
    assert_eq!(refused, vec![false, false, true], "{reopened:?}");
    assert_eq!(events(&t, "task_end").len(), 1, "one task, one end");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_traps_is_traced_and_the_session_goes_on_with_a_fresh_instance() {
    let stub = stub(vec![Turn::text("one"), Turn::text("two")]);
    let cap = hooked(&stub.url(), "probe-trap", &[("probe", "hook-probe", &probe(""))], "", "");
    let session = cap.launch().await.expect("launch");
    for expected in ["one", "two"] {
        let (outcome, _) = run_task(&session, "go").await;
        assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, expected));
    }
    let t = trace(&session);
    let errors = events(&t, "hook_error");
    let traps: Vec<&&Value> = errors.iter().filter(|e| e["event"] == "on-inference").collect();
    assert_eq!(traps.len(), 1, "the second task's instance never learned its name: {errors:?}");
    assert_eq!(traps[0]["code"], "E-RUN-092");
    assert_eq!(traps[0]["cause"], "E-RUN-032", "{:?}", traps[0]);
    assert!(traps[0]["message"].as_str().expect("message").contains("trapping on purpose"), "{:?}", traps[0]);
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hook_that_spins_is_stopped_at_its_deadline_and_the_task_completes() {
    let stub = stub(vec![Turn::text("done")]);
    let caps = "capabilities:\n  limits: {deadline_seconds: 1}\n";
    let cap = hooked(&stub.url(), "probe-spin", &[("probe", "hook-probe", &probe(""))], "", caps);
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "go").await;
    assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, "done"));
    let t = trace(&session);
    let errors = events(&t, "hook_error");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert_eq!((errors[0]["event"].as_str(), errors[0]["cause"].as_str()), (Some("on-inference"), Some("E-RUN-030")));
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replace_context_outside_compaction_is_discarded_with_its_code() {
    let stub = stub(vec![Turn::text("kept")]);
    let hook = probe("commit_policy: replace-context\n");
    let cap = hooked(&stub.url(), "probe-outside", &[("probe", "hook-probe", &hook)], "", "");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "go").await;
    assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, "kept"));
    let t = trace(&session);
    let refused = events(&t, "hook_dispatch_error");
    assert_eq!(refused.len(), 1, "{refused:?}");
    assert_eq!(
        (refused[0]["event"].as_str(), refused[0]["arm"].as_str(), refused[0]["code"].as_str()),
        (Some("on-inference"), Some("replace-context"), Some("E-RUN-093"))
    );
    assert!(events(&t, "compaction").is_empty());
    let conversation = capsule_actors::read_conversation(&session.dir.join("conversation.jsonl"));
    assert_eq!(conversation.len(), 2, "the context was not replaced");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_policy_the_binding_cannot_honour_is_refused_at_launch() {
    let hook = probe("binding: on-inference\ncommit_policy: replace-context\n");
    let cap = hooked("http://127.0.0.1:9", "probe-mismatch", &[("probe", "hook-probe", &hook)], "", "");
    let Err(e) = cap.launch().await else { panic!("launched with a commit_policy its binding cannot honour") };
    let text = e.to_string();
    assert!(text.contains("E-CAP-012") && text.contains("commit_policy") && text.contains("on-inference"), "{text}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_async_hook_runs_every_event_in_order_before_the_session_ends() {
    let stub = stub(vec![
        Turn::tool_call("files", json!({"op": "write", "path": "a.txt", "content": "1"})),
        Turn::tool_call("files", json!({"op": "write", "path": "b.txt", "content": "2"})),
        Turn::text("done"),
    ]);
    let hook = probe("execution_mode: async\n");
    let cap = hooked(&stub.url(), "probe-error", &[("probe", "hook-probe", &hook)], "", "");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "go").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok);
    session.shutdown().await;
    // The hook fails `on-tool-call` only once it has learned its capsule's name at
    // `on-session-start`: two failures mean its queue ran in order, and they are in the trace
    // before `session_end` because the end waits for the queue.
    let t = trace(&session);
    let kinds: Vec<&str> = t.iter().map(|e| e["event_type"].as_str().unwrap_or("")).collect();
    let failed: Vec<usize> = t
        .iter()
        .enumerate()
        .filter(|(_, e)| e["event_type"] == "hook_error" && e["event"] == "on-tool-call")
        .map(|(i, _)| i)
        .collect();
    assert_eq!(failed.len(), 2, "{kinds:?}");
    let end = kinds.iter().rposition(|k| *k == "session_end").expect("session_end");
    assert!(failed.iter().all(|i| *i < end), "{kinds:?}");
    assert!(events(&t, "hook_dispatch_error").is_empty(), "nothing dropped");
}
