//! Context occupancy and compaction: a long task crosses the window, the compaction hook
//! (`hook-compact`, summarising through `run-inference` on the primary choice) replaces the
//! older history, the last tool exchange survives, the next request is smaller, and the trace
//! says so. Without a hook, or with a replacement that breaks the tool pairs, the context stays.

use crate::common::*;
use crate::hooks::{events, hook_folder, hooked, probe};
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;
use serde_json::{Value, json};

/// Two files of about 4,000 tokens each, distinct words, under the capsule's `files/`.
fn big_files(cap: &Capsule) -> (String, String) {
    let files = cap.workdir.join("files");
    std::fs::create_dir_all(&files).expect("files");
    let a: String = (0..4000).map(|i| format!("alpha{i} ")).collect();
    let b: String = (0..4000).map(|i| format!("beta{i} ")).collect();
    std::fs::write(files.join("a.txt"), &a).expect("a");
    std::fs::write(files.join("b.txt"), &b).expect("b");
    (a, b)
}

/// Read a, read b (the history then holds both), then a reply. With a window of 20,000 and a
/// threshold of 0.6 the history crosses 12,000 tokens only after the second read.
fn two_reads() -> Vec<Turn> {
    vec![
        Turn::tool_call("files", json!({"op": "read", "path": "a.txt"})),
        Turn::tool_call("files", json!({"op": "read", "path": "b.txt"})),
    ]
}

const WINDOW: &str = "context:\n  max_tokens: 20000\n";
const THRESHOLD: &str = "  compaction:\n    threshold: 0.6\n    system_prompt: Summarise for the test.\n";

fn compact_hook() -> String {
    "name: compact\nversion: 0.1.0\nruntime: hook\nbinding: on-compaction\ncommit_policy: replace-context\nrequires_files: [hook-compact.wasm]\n".to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_task_crosses_the_window_and_the_compaction_hook_keeps_the_last_tool_pair() {
    let mut turns = two_reads();
    turns.push(Turn::text("SUMMARY: alpha words were read"));
    turns.push(Turn::text("done"));
    let stub = stub(turns);
    let hooks = [("compact", "hook-compact", compact_hook())];
    let hooks: Vec<(&str, &str, &str)> = hooks.iter().map(|(a, b, c)| (*a, *b, c.as_str())).collect();
    let cap = hooked(&stub.url(), "long-task", &hooks, THRESHOLD, WINDOW);
    let (a, b) = big_files(&cap);
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "read both files").await;
    assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, "done"), "{}", outcome.message);
    let requests = stub.requests();
    assert_eq!(requests.len(), 4, "two reads, the summary, the reply");
    // The summary call: the hook's prompt, no tools, the transcript of the older history.
    let summary_call = &requests[2].body;
    assert_eq!(summary_call["system"], "Summarise for the test.", "{summary_call}");
    assert!(summary_call.get("tools").is_none_or(|t| t.as_array().is_some_and(Vec::is_empty)));
    assert!(summary_call.to_string().contains("alpha3999"), "the older history is summarised");
    // The next agent request: the summary, then the last tool exchange whole; not the first read.
    let next = requests[3].body.to_string();
    assert!(next.contains("SUMMARY: alpha words were read"), "{}", &next[..next.len().min(2000)]);
    assert!(next.contains("beta3999"), "the last tool result survives");
    assert!(!next.contains("alpha3999"), "the first read is gone");
    assert!(next.len() < requests[1].body.to_string().len() + b.len() / 2, "the next request is smaller");
    let t = trace(&session);
    let compaction = events(&t, "compaction");
    assert_eq!(compaction.len(), 1, "{compaction:?}");
    let (before, after) =
        (compaction[0]["tokens_before"].as_u64().expect("n"), compaction[0]["tokens_after"].as_u64().expect("n"));
    assert!(before >= 12000 && after < before / 2 + 500, "{before} → {after}");
    let hi = events(&t, "hook_inference");
    assert_eq!((hi.len(), hi[0]["hook"].as_str(), hi[0]["error"].is_null()), (1, Some("compact"), true), "{hi:?}");
    // Compaction never costs a turn: the reply came on turn 3.
    let inferences = events(&t, "inference");
    assert_eq!(inferences.iter().map(|e| e["turn"].as_u64().unwrap_or(0)).collect::<Vec<_>>(), vec![1, 2, 3]);
    // The hook's call was admitted and settled by the spend meter like any other.
    let spend = std::fs::read_to_string(session.dir.join("spend.jsonl")).expect("spend journal");
    assert_eq!(spend.lines().filter(|l| l.contains("\"k\":\"reserve\"")).count(), 4, "{spend}");
    // A restarted or resumed loop rebuilds the compacted context, not the whole record.
    let context = capsule_actors::read_conversation(&session.dir.join("conversation.jsonl"));
    let text = serde_json::to_string(&context).expect("json");
    assert!(text.contains("SUMMARY") && !text.contains("alpha3999") && text.contains("beta3999"));
    assert!(a.len() > 10_000);
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_compaction_hook_the_context_stays_and_the_trace_says_why() {
    let mut turns = two_reads();
    turns.push(Turn::text("done"));
    let stub = stub(turns);
    let cap = hooked(&stub.url(), "no-hook", &[], THRESHOLD, WINDOW);
    big_files(&cap);
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "read both files").await;
    assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, "done"));
    assert!(stub.requests()[2].body.to_string().contains("alpha3999"), "nothing was dropped");
    let t = trace(&session);
    let declined = events(&t, "compaction_declined");
    assert_eq!(declined.len(), 1, "{declined:?}");
    assert_eq!(declined[0]["reason"], "no_hook_replacement");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_that_drops_a_tool_result_is_declined_and_the_task_goes_on() {
    let mut turns = two_reads();
    turns.push(Turn::text("done"));
    let stub = stub(turns);
    let hook = probe("commit_policy: replace-context\n");
    let cap = hooked(&stub.url(), "probe-drop", &[("probe", "hook-probe", &hook)], THRESHOLD, WINDOW);
    big_files(&cap);
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "read both files").await;
    assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, "done"));
    let t = trace(&session);
    let declined = events(&t, "compaction_declined");
    assert_eq!(declined.len(), 1, "{declined:?}");
    assert_eq!(declined[0]["reason"], "tool_pairs");
    assert!(events(&t, "compaction").is_empty());
    let last: Value = stub.requests()[2].body.clone();
    assert!(last.to_string().contains("beta3999") && last.to_string().contains("alpha3999"));
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_compaction_hook_that_fails_fails_the_task_with_its_code_and_the_session_goes_on() {
    let stub = stub(two_reads());
    let hook = probe("commit_policy: replace-context\n");
    let cap = hooked(&stub.url(), "probe-failcompact", &[("probe", "hook-probe", &hook)], THRESHOLD, WINDOW);
    big_files(&cap);
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "read both files").await;
    assert_eq!(outcome.exit_status, ExitStatus::Failed);
    assert!(outcome.message.contains("E-RUN-094") && outcome.message.contains("probe"), "{}", outcome.message);
    assert_eq!(stub.requests().len(), 2, "no request was sent over the window");
    let t = trace(&session);
    let errors = events(&t, "hook_error");
    assert_eq!((errors.len(), errors[0]["event"].as_str()), (1, Some("on-compaction")), "{errors:?}");
    // The session still serves: the next task is answered with the same coded failure, at once.
    let (again, _) = run_task(&session, "and again").await;
    assert!(again.message.contains("E-RUN-094"), "{}", again.message);
    assert_eq!(stub.requests().len(), 2);
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_compaction_summary_runs_on_the_primary_choice_after_the_agent_switched() {
    let primary =
        stub(vec![Turn::tool_call("switch-driver", json!({"driver": "backup"})), Turn::text("SUMMARY: read")]);
    let mut alt_turns = two_reads();
    alt_turns.push(Turn::text("done on backup"));
    let backup = stub(alt_turns);
    let y = format!(
        "name: switch-then-compact\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{p}', keyless: true}}}}\n  - {{name: second, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{a}', keyless: true}}}}\n  - {{name: files, runtime: tool, source: '{{DIST}}/tool-files.wasm'}}\n  - {{name: compact, runtime: hook, source: hooks/compact}}\ninference:\n  model: claude-test\n  driver: {{artifact: anthropic}}\n  alternates:\n    - {{name: backup, model: claude-backup, driver: second}}\n{THRESHOLD}control:\n  agent_settings: [inference.driver]\n{WINDOW}",
        p = primary.url(),
        a = backup.url()
    );
    let cap = Capsule::new(&y);
    hook_folder(&cap, "compact", "hook-compact", &compact_hook());
    big_files(&cap);
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "switch, then read both files").await;
    assert_eq!(
        (outcome.exit_status, outcome.message.as_str()),
        (ExitStatus::Ok, "done on backup"),
        "{}",
        outcome.message
    );
    let (p, b) = (primary.requests(), backup.requests());
    assert_eq!((p.len(), b.len()), (2, 3), "the switch, then two reads and the reply on backup");
    assert_eq!(p[1].body["system"], "Summarise for the test.", "the summary went to the primary");
    assert_eq!(p[1].body["model"], "claude-test");
    assert!(b[2].body.to_string().contains("SUMMARY: read"), "and the agent continued on backup with it");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_compaction_drops_the_held_continuation_so_the_next_call_resends_everything() {
    // driver-stateful answers `messages=<n> continuation=<id|none>` and always hands back a
    // continuation id, which the loop holds; the compaction must drop it.
    let y = "name: stateful-compact\nartifacts:\n  - {name: d, runtime: driver, source: '{DIST}/driver-stateful.wasm'}\n  - {name: compact, runtime: hook, source: hooks/compact}\ninference:\n  model: m\n  driver: {artifact: d}\n  compaction:\n    threshold: 0.3\ncontext:\n  max_tokens: 10000\n";
    let cap = Capsule::new(y);
    hook_folder(&cap, "compact", "hook-compact", &compact_hook());
    let session = cap.launch().await.expect("launch");
    let (first, _) = run_task(&session, "hi").await;
    assert_eq!(first.message, "messages=1 continuation=none");
    let big: String = (0..4000).map(|i| format!("gamma{i} ")).collect();
    let (second, _) = run_task(&session, &big).await;
    // The summary and the new task's message, both sent, with no continuation id.
    assert_eq!(second.message, "messages=2 continuation=none", "{}", second.message);
    let t = trace(&session);
    assert_eq!(events(&t, "compaction").len(), 1);
    session.shutdown().await;
}
