//! `capsule run` runs its one capsule on one runtime worker, the process's main thread (a
//! current-thread runtime: `capsule_actors::workers`, whose own test checks it), and a tool
//! blocked in a file operation does not hold it: the door still answers. The tool's thread is
//! kept on the worker's CPU; the worker is not.

use crate::common::{
    a_thread_waits_in, anthropic_capsule, cpus_allowed, make_fifo, repo, stub, threads_of, unblock_fifo,
};
use capsule_stub::Turn;
use std::io::BufRead;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsule_run_on_its_one_worker_answers_its_door_while_a_tool_blocks_in_a_file_operation() {
    let provider =
        stub(vec![Turn::tool_call("files", serde_json::json!({"op": "read", "path": "slow"})), Turn::text("done")]);
    let cap = anthropic_capsule(
        &provider.url(),
        &[("files", "{ARTIFACTS}/files")],
        "capabilities:\n  filesystem: {scope: .}\n",
    );
    // The tools' folder is `<workdir>/files`; the FIFO there blocks the tool's open until a
    // writer comes, as a stalled disk would.
    let fifo = cap.workdir.join(capsule_actors::FILES_DIR).join("slow");
    std::fs::create_dir_all(fifo.parent().expect("parent")).expect("files dir");
    make_fifo(&fifo);
    let mut run = Command::new(env!("CARGO_BIN_EXE_capsule"))
        .arg("run")
        .arg(cap.path())
        .args(["--task", "go", "--json", "--workdir"])
        .arg(&cap.workdir)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .env_remove("TOKIO_WORKER_THREADS")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("capsule run");
    let pid = run.id();
    let mut lines = std::io::BufReader::new(run.stdout.take().expect("stdout")).lines();
    let ready: serde_json::Value = serde_json::from_str(&lines.next().expect("ready").expect("line")).expect("json");
    let url = ready["url"].as_str().expect("door url").to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !a_thread_waits_in(pid, "wait_for_partner") {
        assert!(Instant::now() < deadline, "the tool never opened the FIFO");
        assert!(matches!(run.try_wait(), Ok(None)), "capsule run ended before its tool opened the FIFO");
        std::thread::sleep(Duration::from_millis(5));
    }
    // The door is served by the process's one worker (its main thread); the tool's open holds
    // another thread.
    let card = reqwest::Client::new()
        .get(format!("{url}/.well-known/agent-card.json"))
        .timeout(Duration::from_secs(30))
        .send()
        .await
        .map(|r| r.status().as_u16());
    let still_blocked = a_thread_waits_in(pid, "wait_for_partner");
    let threads = threads_of(pid);
    let process_cpus = cpus_allowed(std::path::Path::new(&format!("/proc/{pid}/status")));
    // A writer lets the open finish (the read fails and the task goes on); opened before any
    // assertion, so a failing run ends.
    let writer = unblock_fifo(&fifo);
    assert_eq!(card.ok(), Some(200), "the door answered while the tool was blocked");
    assert!(still_blocked, "the tool's open was still waiting for a writer");
    let tool = threads.iter().find(|t| t.wchan == "wait_for_partner").expect("the tool's thread");
    assert!(tool.cpus.parse::<usize>().is_ok(), "the tool's thread is kept on one CPU: {tool:?}");
    // The main thread is named after the binary; tokio's blocking-pool threads (the tool's) are
    // `tokio-…`.
    let worker = threads.iter().find(|t| t.name == "capsule").expect("the main thread");
    assert_eq!(worker.cpus, process_cpus, "the worker may still run on every CPU of the process: {threads:?}");
    let status = run.wait().expect("exits");
    drop(writer);
    assert!(status.success(), "the task ends and the process exits 0: {status:?}");
    assert_eq!(provider.requests().len(), 2, "the tool's error went back to the model, which answered");
}
