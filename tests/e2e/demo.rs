//! The real binary: `capsule demo` completes a task with a tool call offline, and `capsule run`
//! exits non-zero when the task fails or the capsule is refused.

use crate::common::*;
use std::process::Command;

fn capsule() -> Command {
    Command::new(env!("CARGO_BIN_EXE_capsule"))
}

#[test]
fn capsule_demo_completes_a_task_with_a_tool_call_and_leaves_result_and_trace() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = capsule()
        .current_dir(repo())
        .args(["demo", "--json", "--workdir"])
        .arg(work.path())
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    let mut lines = stdout.lines();
    let ready: serde_json::Value = serde_json::from_str(lines.next().expect("ready line")).expect("json");
    assert_eq!(ready["type"], "ready");
    let session = ready["session_id"].as_str().expect("session id").to_string();
    assert!(session.starts_with("ses_") && session.len() == 36, "{session}");
    let frames: Vec<serde_json::Value> = lines.map(|l| serde_json::from_str(l).expect("frame line is JSON")).collect();
    assert!(
        frames.iter().any(|f| f["event"] == "artifact" && f["data"]["artifact"]["is_error"] == false),
        "a tool call ran"
    );
    let dir = work.path().join(&session);
    let result = std::fs::read_to_string(dir.join("out/result.txt")).expect("result.txt");
    assert!(result.contains("Hello from a Murmur capsule"), "{result}");
    assert_eq!(
        std::fs::read_to_string(work.path().join("files/hello.txt")).expect("the tool wrote in the tools' workdir"),
        "Hello from a Murmur capsule!\n"
    );
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    for e in ["session_start", "task_start", "inference", "tool_call", "task_end", "session_end"] {
        assert!(trace.contains(&format!("\"event_type\":\"{e}\"")), "trace lacks {e}");
    }
}

#[test]
fn capsule_run_refuses_a_missing_manifest_with_a_code_and_exit_2() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = capsule()
        .args(["run"])
        .arg(dir.path())
        .args(["--task", "x", "--workdir"])
        .arg(dir.path().join("w"))
        .output()
        .expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("E-MAN-001"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsule_run_exits_1_when_the_provider_fails_and_still_writes_the_result() {
    let stub = stub(vec![capsule_stub::Turn::http_error(500, "{\"error\":\"boom\"}")]);
    let cap = anthropic_capsule("http://127.0.0.1:9", &[], "");
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["run"])
        .arg(cap.path())
        .args(["--task", "x", "--json", "--keyless", "--endpoint", &stub.url(), "--workdir"])
        .arg(&cap.workdir)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let ready: serde_json::Value = serde_json::from_str(stdout.lines().next().expect("ready")).expect("json");
    let dir = cap.workdir.join(ready["session_id"].as_str().expect("id"));
    let result = std::fs::read_to_string(dir.join("out/result.txt")).expect("result");
    assert!(result.starts_with("error: E-RUN-040") && result.contains("HTTP 500"), "{result}");
}

#[test]
fn capsule_demo_runs_through_the_openai_driver_too_and_ends_with_one_summary_line() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = capsule()
        .current_dir(repo())
        .args(["demo", "--provider", "openai", "--workdir"])
        .arg(work.path())
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .output()
        .expect("runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(work.path().join("files/hello.txt")).expect("the tool wrote in the tools' workdir"),
        "Hello from a Murmur capsule!\n"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    // A finished tool call shows its input, shortened, beside its result.
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l.starts_with("✓ files {") && l.contains("\"op\":\"write\"")),
        "the call's input is shown: {stdout}"
    );
    let summary: Vec<&str> = stderr.lines().filter(|l| l.starts_with("ok · ")).collect();
    assert_eq!(summary.len(), 1, "one summary line: {stderr}");
    assert!(summary[0].contains("3 turns") && summary[0].contains("tokens in"), "{}", summary[0]);
    // The tokens are the trace's own sums: the stub reports usage on every answer.
    let tokens: Vec<u64> = summary[0]
        .split(" · ")
        .nth(2)
        .and_then(|t| t.strip_suffix(" out"))
        .map(|t| t.split(" tokens in, ").filter_map(|n| n.parse().ok()).collect())
        .unwrap_or_default();
    assert!(tokens.len() == 2 && tokens.iter().all(|&n| n > 0), "tokens in and out counted: {}", summary[0]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sigterm_during_a_task_is_a_graceful_stop_once_the_task_ends_never_a_kill() {
    use tokio::io::AsyncBufReadExt;
    let slow = capsule_stub::Turn { delay_ms: Some(500), ..capsule_stub::Turn::text("finished") };
    let stub = stub(vec![slow]);
    let cap = anthropic_capsule("http://127.0.0.1:9", &[], "lifecycle: {after_task: sleep}\n");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["run"])
        .arg(cap.path())
        .args(["--task", "x", "--json", "--keyless", "--endpoint", &stub.url(), "--workdir"])
        .arg(&cap.workdir)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("runs");
    let mut lines = tokio::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
    let ready: serde_json::Value =
        serde_json::from_str(&lines.next_line().await.expect("read").expect("ready")).expect("json");
    // The task is still waiting on the provider: the signal arrives before anyone waits for it.
    let pid = child.id().expect("pid").to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let status = child.wait().await.expect("exits");
    assert!(status.success(), "a graceful stop, not death by signal: {status:?}");
    let dir = std::path::PathBuf::from(ready["session_dir"].as_str().expect("dir"));
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    assert!(trace.contains("\"event_type\":\"session_end\""), "the session was closed properly");
}
