//! Adversarial guests, each named for what it tries, each shown contained: the file system
//! outside the scope, an unlisted host, an ungranted env var, unbounded memory, an endless loop.
//! These call the runtime directly with the grants a launch would build.

use crate::common::*;
use capsule_protocol::manifest::{AllowRule, Limits};
use capsule_runtime::{
    ArtifactRole, CallError, Grants, LoadedArtifact, NoEvents, OutgoingPolicy, Scope, ToolInput, ToolStatus,
};
use std::sync::Arc;

fn tool_grants(preopen: Option<std::path::PathBuf>, limits: Limits) -> Grants {
    Grants {
        role: ArtifactRole::Tool,
        env: Vec::new().into(),
        preopen: preopen.map(|workdir| Scope { workdir, relative: ".".into() }),
        limits,
        policy: OutgoingPolicy::default(),
        disk: Default::default(),
    }
}

async fn call(name: &str, grants: &Grants, data: &str) -> capsule_runtime::CallOutcome {
    let host = host();
    let a = LoadedArtifact::load_file(&host, name, &dist(name)).expect("loads");
    a.call(&host, grants, Arc::new(NoEvents), ToolInput { data: Some(data.into()), log_path: None }).await
}

#[tokio::test]
async fn guest_read_outside_scope_sees_neither_parent_files_nor_the_host_root() {
    let outer = tempfile::tempdir().expect("tempdir");
    std::fs::write(outer.path().join("outside.txt"), "secret outside the scope").expect("write");
    let scope = outer.path().join("scope");
    std::fs::create_dir(&scope).expect("mkdir");
    let out = call("guest-read-outside-scope", &tool_grants(Some(scope), Limits::default()), "").await;
    let r = out.result.expect("the guest returns");
    assert_eq!(r.status, ToolStatus::Failed, "a read escaped: {:?}", r.data);
    assert!(!r.data.unwrap_or_default().contains("secret"));
}

#[tokio::test]
async fn guest_dial_unlisted_host_is_denied_and_a_listed_one_is_reached() {
    let stub = stub(vec![]);
    let url = format!("{}/anything", stub.url());
    let denied =
        call("guest-dial-unlisted-host", &tool_grants(None, Limits::default()), &url).await.result.expect("returns");
    assert_eq!(denied.status, ToolStatus::Failed);
    assert!(denied.summary.unwrap_or_default().contains("HttpRequestDenied"));
    assert!(stub.requests().is_empty(), "nothing reached the host");

    let mut allowed = tool_grants(None, Limits::default());
    allowed.policy.allow = vec![AllowRule::parse(&stub.addr().to_string()).expect("rule")];
    let reached = call("guest-dial-unlisted-host", &allowed, &url).await.result.expect("returns");
    assert_eq!(reached.status, ToolStatus::Passed, "{:?}", reached.summary);
    assert_eq!(stub.requests().len(), 1);
}

#[tokio::test]
async fn guest_read_env_sees_only_granted_variables_and_never_credentials() {
    let cap = Capsule::new(
        "name: env\nartifacts:\n  - {name: d, runtime: driver, source: '{DIST}/driver-trap.wasm', gateway: {endpoint: 'http://127.0.0.1:9', keyless: true}}\n  - {name: reader, runtime: tool, source: '{DIST}/guest-read-env.wasm'}\ncapabilities: {env: {allow: [GRANTED_VAR, SERVICE_API_KEY]}}\ninference: {model: m, driver: {artifact: d}}\n",
    );
    let env = [("GRANTED_VAR", "yes"), ("UNGRANTED_VAR", "no"), ("SERVICE_API_KEY", "sk-should-never-pass")]
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let opts = cap.options(env);
    let prepared = capsule_actors::launch::prepare(&opts, "ses_test").expect("prepare");
    assert!(
        prepared.warnings.iter().any(|w| w.code.as_str() == "W-CAP-001"),
        "the credential-shaped grant is warned about"
    );
    let reader = prepared.artifacts.iter().find(|a| a.decl.name == "reader").expect("reader");
    let host = opts.host.clone();
    let run = |var: &'static str| {
        let (host, reader) = (host.clone(), reader.loaded.clone());
        let grants = reader_grants(&prepared, "reader");
        async move {
            reader
                .call(&host, &grants, Arc::new(NoEvents), ToolInput { data: Some(var.into()), log_path: None })
                .await
                .result
                .expect("returns")
        }
    };
    let granted = run("GRANTED_VAR").await;
    assert_eq!(granted.data.as_deref(), Some("yes"));
    let ungranted = run("UNGRANTED_VAR").await;
    assert_eq!(ungranted.status, ToolStatus::Failed);
    let key = run("SERVICE_API_KEY").await;
    assert_eq!(key.status, ToolStatus::Failed, "a credential-shaped variable is never passed");
    let names = granted.metadata.iter().find(|(k, _)| k == "names").map(|(_, v)| v.clone()).unwrap_or_default();
    for n in names.split(',').filter(|n| !n.is_empty()) {
        assert!(n == "GRANTED_VAR" || n.starts_with("MURMUR_"), "unexpected variable visible: {n}");
    }
}

fn reader_grants(p: &capsule_actors::launch::Prepared, name: &str) -> Grants {
    p.artifacts.iter().find(|a| a.decl.name == name).expect("artifact").grants.clone()
}

#[tokio::test]
async fn guest_balloon_memory_is_stopped_at_the_limit_and_the_host_keeps_serving() {
    let limits = Limits { memory_bytes: 64 * 1024 * 1024, ..Limits::default() };
    let out = call("guest-balloon-memory", &tool_grants(None, limits), "").await;
    match out.result {
        Err(CallError::MemoryLimit { limit, .. }) => assert_eq!(limit, 64 * 1024 * 1024),
        other => panic!("expected the memory limit, got {other:?}"),
    }
    let next = call("guest-read-env", &tool_grants(None, Limits::default()), "HOME").await;
    assert!(next.result.is_ok(), "the next call runs");
}

#[tokio::test]
async fn guest_spin_forever_is_interrupted_at_its_deadline() {
    let limits = Limits { deadline_seconds: 1, ..Limits::default() };
    let started = std::time::Instant::now();
    let out = call("guest-spin-forever", &tool_grants(None, limits), "").await;
    assert!(matches!(out.result, Err(CallError::Deadline { .. })), "{:?}", out.result);
    assert!(started.elapsed() < std::time::Duration::from_secs(30), "interrupted, not left running");
}

/// A guest that never calls the host holds a runtime thread for one epoch tick at a time, not
/// for its whole deadline: on a runtime with one thread, another task runs while it spins.
#[tokio::test(flavor = "current_thread")]
async fn guest_spin_forever_lets_the_runtimes_other_tasks_run() {
    let (tx, mut rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let _ = tx.send(std::time::Instant::now());
    });
    let limits = Limits { deadline_seconds: 1, ..Limits::default() };
    let out = call("guest-spin-forever", &tool_grants(None, limits), "").await;
    let ended = std::time::Instant::now();
    assert!(matches!(out.result, Err(CallError::Deadline { .. })), "{:?}", out.result);
    let other = rx.try_recv().expect("the other task ran while the guest spun");
    assert!(other < ended);
}

/// A tool with a folder runs on a thread of its own; dropping its call still stops it there,
/// long before its deadline: the store (which holds the call's event sink) is dropped. On both
/// of tokio's runtimes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_call_of_a_tool_with_a_folder_stops_on_the_multi_thread_runtime() {
    a_dropped_call_of_a_tool_with_a_folder_stops().await;
}

#[tokio::test]
async fn a_dropped_call_of_a_tool_with_a_folder_stops_on_its_thread() {
    a_dropped_call_of_a_tool_with_a_folder_stops().await;
}

/// A tool whose file operation blocks (here opening a FIFO no one writes to, as a stalled disk
/// would hold it) holds only its own thread: the runtime's one worker goes on running other
/// tasks, and the call ends once the operation does.
#[tokio::test(flavor = "multi_thread", worker_threads = 1)]
async fn a_tool_blocked_in_a_file_operation_leaves_the_runtimes_worker_free() {
    let scope = tempfile::tempdir().expect("tempdir");
    let fifo = scope.path().join("slow");
    make_fifo(&fifo);
    let grants = tool_grants(Some(scope.path().to_path_buf()), Limits::default());
    let host = host();
    let files = LoadedArtifact::load_file(&host, "tool-files", &dist("tool-files")).expect("loads");
    let input = ToolInput { data: Some(r#"{"op":"read","path":"slow"}"#.into()), log_path: None };
    // Spawned, so the call runs on the worker, not on this test's own thread.
    let call = tokio::spawn(async move { files.call(&host, &grants, Arc::new(NoEvents), input).await });
    // Some thread of this process waits in the FIFO's open for a writer (the kernel names where
    // a thread sleeps in /proc); until then the tool has not reached its read.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    while !a_thread_waits_in("self", "wait_for_partner") {
        assert!(std::time::Instant::now() < deadline, "the tool never opened the FIFO");
        assert!(!call.is_finished(), "the call ended before it opened the FIFO");
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // Timed by this thread's clock: a blocked worker would also stop tokio's timers.
    let other = tokio::spawn(async { 7 });
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !other.is_finished() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    let (worker_was_free, call_was_waiting) = (other.is_finished(), !call.is_finished());
    // A writer lets the open finish; opened before any assertion, so a failing run ends instead
    // of waiting on the FIFO.
    let writer = unblock_fifo(&fifo);
    assert!(worker_was_free, "the worker ran no other task while the tool's open blocked");
    assert!(call_was_waiting, "the open was still waiting for a writer");
    assert_eq!(other.await.expect("joins"), 7);
    let out = call.await.expect("joins");
    drop(writer);
    let r = out.result.expect("the tool returns");
    assert!(r.summary.unwrap_or_default().contains("cannot read `slow`"));
}

async fn a_dropped_call_of_a_tool_with_a_folder_stops() {
    let scope = tempfile::tempdir().expect("tempdir");
    let limits = Limits { deadline_seconds: 600, ..Limits::default() };
    let grants = tool_grants(Some(scope.path().to_path_buf()), limits);
    let host = host();
    let spin = LoadedArtifact::load_file(&host, "guest-spin-forever", &dist("guest-spin-forever")).expect("loads");
    let events = Arc::new(NoEvents);
    let input = ToolInput { data: None, log_path: None };
    let call = spin.call(&host, &grants, events.clone(), input);
    let cut = tokio::time::timeout(std::time::Duration::from_millis(300), call).await;
    assert!(cut.is_err(), "the guest spins until it is stopped");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while Arc::strong_count(&events) > 1 {
        assert!(std::time::Instant::now() < deadline, "the call went on after it was dropped");
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}
