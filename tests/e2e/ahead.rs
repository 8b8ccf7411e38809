//! A driver's and a tool's next instance, made while the provider answers
//! (`runtime/src/ahead.rs`, `runtime/src/tool_ahead.rs`): the call that takes it runs with its
//! own grants, a capsule's later calls run in such instances with nothing of the call lost
//! (key, events, the tool's folder), and nothing made is held past the wait it was made for.

use crate::common::*;
use capsule_protocol::manifest::{AllowRule, Limits};
use capsule_protocol::trace::ExitStatus;
use capsule_runtime::{
    Ahead, ArtifactRole, Grants, LoadedArtifact, MAX_HELD, NoEvents, OutgoingPolicy, ToolAhead, ToolInput, ToolStatus,
    Waits, held,
};
use capsule_stub::{ToolCall, Turn};
use serde_json::json;
use std::sync::Arc;

fn grants(env: &str, allow: Option<AllowRule>) -> Grants {
    Grants {
        role: ArtifactRole::Tool,
        env: vec![("WHICH".into(), env.into())].into(),
        preopen: None,
        limits: Limits::default(),
        policy: OutgoingPolicy { allow: allow.into_iter().collect(), ..OutgoingPolicy::default() },
        disk: Default::default(),
    }
}

/// What `guest-read-env` answers for `WHICH` in `grants("a", …)`.
fn read_a() -> capsule_runtime::ToolResult {
    capsule_runtime::ToolResult {
        status: ToolStatus::Passed,
        summary: Some("WHICH is visible".into()),
        data: Some("a".into()),
        data_path: None,
        truncated: false,
        metadata: vec![("names".into(), "WHICH".into())],
    }
}

fn input(data: &str) -> ToolInput {
    ToolInput { data: Some(data.into()), log_path: None }
}

/// A capsule of the Anthropic driver (its key `sk-ahead` from the environment) and the file
/// tool, against `stub`, launched (the capsule holds the session's folders: keep it).
async fn launch_files_capsule(stub: &capsule_stub::StubHandle) -> (Capsule, capsule_actors::Session) {
    let cap = Capsule::new(&format!(
        "name: ahead\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{}', api_key: '${{AHEAD_KEY}}'}}}}\n  - {{name: files, runtime: tool, source: '{{ARTIFACTS}}/files'}}\ninference: {{model: m, driver: {{artifact: anthropic}}}}\n",
        stub.url()
    ));
    let session = cap.launch_with_env(&[("AHEAD_KEY", "sk-ahead")]).await.expect("launch");
    (cap, session)
}

#[tokio::test]
async fn a_call_in_an_instance_made_ahead_has_its_own_policy_and_one_made_with_other_env_is_not_taken() {
    let stub = stub(vec![]);
    let url = format!("{}/anything", stub.url());
    let allow = AllowRule::parse(&stub.addr().to_string()).expect("rule");
    let host = host();
    let dial = LoadedArtifact::load_file(&host, "dial", &dist("guest-dial-unlisted-host")).expect("loads");
    let mut ahead = Ahead::default();

    let first =
        dial.call_ahead(&host, &grants("a", Some(allow.clone())), Arc::new(NoEvents), input(&url), &mut ahead).await;
    assert!(!first.made_ahead, "nothing was made before the first call");
    assert_eq!(first.result.expect("returns").status, ToolStatus::Passed);
    assert!(ahead.settle().await, "an instance was made while the first call's request was out");

    // Made with the first call's grants, which allowed the stub; this call allows nothing.
    let denied = dial.call_ahead(&host, &grants("a", None), Arc::new(NoEvents), input(&url), &mut ahead).await;
    assert!(denied.made_ahead, "same environment and limits: the instance made ahead is taken");
    let denied = denied.result.expect("returns");
    assert_eq!(denied.status, ToolStatus::Failed);
    assert!(denied.summary.unwrap_or_default().contains("HttpRequestDenied"), "the call's own policy applies");
    assert_eq!(stub.requests().len(), 1, "the denied request reached nothing");
    assert!(ahead.settle().await, "a refused request lets the work start too");

    // Made with WHICH=a; this call's environment says b.
    let read = LoadedArtifact::load_file(&host, "read", &dist("guest-read-env")).expect("loads");
    let other = read.call_ahead(&host, &grants("b", None), Arc::new(NoEvents), input("WHICH"), &mut ahead).await;
    assert!(!other.made_ahead, "an instance made with another environment is not taken");
    assert_eq!(other.result.expect("returns").data.as_deref(), Some("b"));
}

#[tokio::test]
async fn at_most_max_held_instances_are_held_at_once_and_clearing_gives_them_back() {
    let host = host();
    let read = LoadedArtifact::load_file(&host, "read", &dist("guest-read-env")).expect("loads");
    // Each keeps its call's used store and the instance made for its next call: two apiece.
    let mut aheads: Vec<Ahead> = (0..MAX_HELD).map(|_| Ahead::default()).collect();
    let mut ready = 0;
    for ahead in &mut aheads {
        // A call that sends no request starts the work when it returns.
        let out = read.call_ahead(&host, &grants("a", None), Arc::new(NoEvents), input("WHICH"), ahead).await;
        assert_eq!(out.result.expect("past the cap, calls still run"), read_a());
        ready += usize::from(ahead.settle().await);
        assert!(held() <= MAX_HELD, "never more than the cap: {}", held());
    }
    assert_eq!(held(), MAX_HELD, "the cap was reached");
    assert!(ready > 0 && ready < aheads.len(), "some were made ahead, and past the cap none: {ready}");
    for ahead in &mut aheads {
        let out = read.call_ahead(&host, &grants("a", None), Arc::new(NoEvents), input("WHICH"), ahead).await;
        assert_eq!(out.result.expect("returns"), read_a());
        ahead.clear();
    }
    // A make still under way when its `Ahead` was cleared drops what it made when it ends.
    eventually("every instance held is given back", || async { held() == 0 }).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsules_later_driver_calls_run_in_instances_made_ahead_with_their_key_and_their_events() {
    let list = json!({"op": "list", "path": "."});
    let turns: Vec<Turn> =
        (1..=3).map(|i| Turn { text: Some(format!("turn {i}")), ..Turn::tool_call("files", list.clone()) }).collect();
    let stub = stub(turns.into_iter().chain([Turn::text("all done")]).collect());
    let (_cap, session) = launch_files_capsule(&stub).await;
    let (outcome, frames) = run_task(&session, "go").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);

    let made: Vec<bool> = trace(&session)
        .iter()
        .filter(|e| e["event_type"] == "inference")
        .map(|e| e["instance_made_ahead"].as_bool().expect("the trace says"))
        .collect();
    assert_eq!(made, [false, true, true, true], "every call after the first runs in an instance made ahead");
    let requests = stub.requests();
    assert_eq!(requests.len(), 4);
    for req in &requests {
        let key = req.headers.iter().find(|(k, _)| k == "x-api-key").map(|(_, v)| v.as_str());
        assert_eq!(key, Some("sk-ahead"), "each call carries the key, made ahead or not");
    }
    // The driver's live events (text chunks, tool-call starts): each call's reach the stream.
    let data: Vec<&str> = frames.iter().map(|f| f.data_json()).collect();
    for text in ["turn 1", "turn 2", "turn 3", "all done"] {
        let chunk = format!("\"text\":\"{text}\"");
        assert!(data.iter().any(|d| d.contains(&chunk)), "the driver's text {text:?} reached the stream: {data:?}");
    }
    let started = data.iter().filter(|d| d.contains("\"tool_name\":\"files\"") && !d.contains("artifact")).count();
    assert_eq!(started, 3, "each call's tool-call start reached the stream: {data:?}");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsules_tool_calls_run_in_instances_made_in_the_providers_wait_and_an_idle_session_holds_none() {
    let list = || ToolCall { id: None, name: "files".into(), input: json!({"op": "list", "path": "."}) };
    let write =
        ToolCall { id: None, name: "files".into(), input: json!({"op": "write", "path": "a.txt", "content": "x"}) };
    let turns = vec![
        Turn::tool_call("files", json!({"op": "list", "path": "."})),
        // Two calls of the tool in one turn: the second comes before any wait.
        Turn { tool_calls: Some(vec![write, list()]), ..Turn::default() },
        Turn { tool_calls: Some(vec![list()]), ..Turn::default() },
        Turn::text("all done"),
    ];
    let stub = stub(turns);
    let (_cap, session) = launch_files_capsule(&stub).await;
    let (outcome, _frames) = run_task(&session, "go").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);

    let calls: Vec<(bool, String)> = trace(&session)
        .iter()
        .filter(|e| e["event_type"] == "tool_call")
        .map(|e| {
            assert_eq!(e["is_error"], false, "{e}");
            (
                e["instance_made_ahead"].as_bool().expect("the trace says"),
                e["content"].as_str().unwrap_or("").to_string(),
            )
        })
        .collect();
    let made: Vec<bool> = calls.iter().map(|c| c.0).collect();
    assert_eq!(
        made,
        [true, true, false, true],
        "the first call of each turn runs in an instance made in the provider's wait (the session's first \
         too); a turn's second call, before any wait, makes its own"
    );
    // The folder is the call's own, resolved at the call: what one call wrote, the next lists.
    assert!(!calls[0].1.contains("a.txt"), "nothing written yet: {:?}", calls[0].1);
    for (i, c) in calls.iter().enumerate().skip(2) {
        assert!(c.1.contains("a.txt"), "call {i} lists the file the turn's first call wrote: {:?}", c.1);
    }
    // The final answer asked for no tools: what was made for a next call is dropped, and the
    // session, still up, holds no instance.
    eventually("the idle session holds no instance", || async { held() == 0 }).await;
    session.shutdown().await;
}

#[tokio::test]
async fn a_tool_instance_is_made_only_in_a_wait_held_for_one_call_and_dropped_at_the_next_news() {
    let host = host();
    let read = LoadedArtifact::load_file(&host, "read", &dist("guest-read-env")).expect("loads");
    let waits = Waits::default();
    let g = grants("a", None);
    let mut ahead = ToolAhead::first(&read, &host, &g, &waits);
    tokio::task::yield_now().await;
    assert!(!ahead.is_ready() && held() == 0, "nothing is made before a wait begins");
    waits.out();
    eventually("made in the wait", || async { ahead.is_ready() }).await;
    assert_eq!(held(), 1);

    let out = read.call_tool_ahead(&host, &g, Arc::new(NoEvents), input("WHICH"), &mut ahead, &waits).await;
    assert!(out.made_ahead, "the call took the instance made in the wait");
    assert_eq!(out.result.expect("returns"), read_a());
    // Its used store waits for the next wait, counted.
    assert_eq!(held(), 1);
    waits.out();
    eventually("the used store dropped, the next instance made", || async { ahead.is_ready() }).await;
    assert_eq!(held(), 1, "the next instance took the used store's place");

    // An answer that asks for no tools: nothing made for a tool call is held past it.
    waits.answered_without_tools();
    eventually("given back at the news", || async { held() == 0 }).await;
    let out = read.call_tool_ahead(&host, &g, Arc::new(NoEvents), input("WHICH"), &mut ahead, &waits).await;
    assert!(!out.made_ahead, "the instance was dropped; the call made its own");
    assert_eq!(out.result.expect("returns"), read_a());
    // A news that is not a wait makes nothing, and the used store goes.
    waits.answered_without_tools();
    eventually("the used store dropped", || async { held() == 0 }).await;
    assert!(!ahead.is_ready());
}

#[tokio::test]
async fn after_an_answer_without_tools_the_tool_instance_is_made_once_more_for_the_next_tasks_first_call() {
    let host = host();
    let read = LoadedArtifact::load_file(&host, "read", &dist("guest-read-env")).expect("loads");
    let waits = Waits::default();
    let g = grants("a", None);
    let mut ahead = ToolAhead::first(&read, &host, &g, &waits);
    // Task 1: its first request out, the tool's call, its last request out, its last answer.
    waits.out();
    eventually("made in the session's first wait", || async { ahead.is_ready() }).await;
    let out = read.call_tool_ahead(&host, &g, Arc::new(NoEvents), input("WHICH"), &mut ahead, &waits).await;
    assert!(out.made_ahead);
    waits.out();
    eventually("made for a next call", || async { ahead.is_ready() }).await;
    waits.answered_without_tools();
    eventually("nothing held while the session is idle", || async { held() == 0 && !ahead.is_ready() }).await;

    // Task 2: its first request out: the instance is made again, and its first call takes it.
    waits.out();
    eventually("made again in the next task's first wait", || async { ahead.is_ready() }).await;
    assert_eq!(held(), 1);
    let out = read.call_tool_ahead(&host, &g, Arc::new(NoEvents), input("WHICH"), &mut ahead, &waits).await;
    assert!(out.made_ahead, "the next task's first call took the instance made in that task's first wait");
    assert_eq!(out.result.expect("returns"), read_a());
    waits.out();
    eventually("made after the call", || async { ahead.is_ready() }).await;
    waits.answered_without_tools();
    eventually("idle again", || async { held() == 0 }).await;

    // Task 3 asks for no tool: the instance made in its wait is dropped at its answer, and no
    // other is made for task 4.
    waits.out();
    eventually("made once more, in task 3's wait", || async { ahead.is_ready() }).await;
    waits.answered_without_tools();
    eventually("dropped at task 3's answer", || async { held() == 0 && !ahead.is_ready() }).await;
    waits.out();
    let out = read.call_tool_ahead(&host, &g, Arc::new(NoEvents), input("WHICH"), &mut ahead, &waits).await;
    assert!(!out.made_ahead, "made once more only: task 4's call made its own");
    assert_eq!(out.result.expect("returns"), read_a());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sessions_second_task_runs_its_first_tool_call_in_an_instance_made_in_its_first_wait() {
    let turns = vec![
        Turn::tool_call("files", json!({"op": "list", "path": "."})),
        Turn::text("one"),
        Turn::tool_call("files", json!({"op": "list", "path": "."})),
        Turn::text("two"),
    ];
    let stub = stub(turns);
    let (_cap, session) = launch_files_capsule(&stub).await;
    for task in ["first", "second"] {
        let (outcome, _frames) = run_task(&session, task).await;
        assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
        eventually("the idle session holds no instance", || async { held() == 0 }).await;
    }
    let made: Vec<bool> = trace(&session)
        .iter()
        .filter(|e| e["event_type"] == "tool_call")
        .map(|e| e["instance_made_ahead"].as_bool().expect("the trace says"))
        .collect();
    assert_eq!(made, [true, true], "each task's first tool call runs in an instance made in that task's first wait");
    session.shutdown().await;
}
