//! Host loss with the real binary: three JetStream servers and three `capsule host --cluster`
//! processes run 30 capsules on multi-turn tasks whose every tool call appends one line to a
//! file. One host is killed (SIGKILL) in the middle of its tasks. The survivors claim its
//! sessions from the cluster (its capsules fetched from the object store into folders of their
//! own) and resume them by the resume rules: every task completes, no tool effect is doubled,
//! a call that was running at the kill is reported interrupted and not run again, and the
//! frame ids of a moved session continue with no repeat.

use crate::common::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster::{self, Record, StreamLog};
use capsule_stub::{Script, Stub, StubHandle, ToolCall, Turn};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

const HOSTS: usize = 3;
const PER_HOST: usize = 10;
/// Tool calls per task, one per turn.
const STEPS: usize = 8;

/// The step at which the watched capsule calls a tool that runs until its deadline, so that a
/// call is running when its host is killed.
const SPIN_STEP: usize = 2;

/// One capsule's provider: `STEPS` turns that each append one line, then a final answer; each
/// answer waits a little, so the tasks are still running when the host is killed. With `spin`,
/// step [`SPIN_STEP`] calls the spinning tool instead.
fn provider(spin: bool) -> StubHandle {
    let mut turns: Vec<Turn> = (0..STEPS)
        .map(|j| Turn {
            tool_calls: Some(vec![if spin && j == SPIN_STEP {
                ToolCall { id: Some(format!("call-{j}")), name: "spin".into(), input: json!({}) }
            } else {
                ToolCall {
                    id: Some(format!("call-{j}")),
                    name: "files".into(),
                    input: json!({"op": "append", "path": "effects.txt", "content": format!("step {j}\n")}),
                }
            }]),
            delay_ms: Some(250),
            ..Default::default()
        })
        .collect();
    turns.push(Turn { text: Some("all steps done".into()), delay_ms: Some(50), ..Default::default() });
    Stub::start(Script::new(turns)).expect("stub starts")
}

/// A host's folder of capsules, each with its components inside it (so the capsule can be
/// kept whole in the cluster's store).
fn capsule_folder(root: &Path, host: usize, stubs: &[StubHandle]) -> PathBuf {
    let caps = root.join("caps");
    let dist = repo().join("components/dist");
    for (k, stub) in stubs.iter().enumerate() {
        let folder = caps.join(format!("c{host}-{k}"));
        std::fs::create_dir_all(&folder).expect("folder");
        for wasm in ["driver-anthropic.wasm", "tool-files.wasm", "guest-spin-forever.wasm"] {
            std::fs::copy(dist.join(wasm), folder.join(wasm)).expect("copy component");
        }
        std::fs::write(
            folder.join("murmur.yaml"),
            format!(
                "name: c{host}-{k}\nversion: 0.1.0\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: ./driver-anthropic.wasm\n    gateway: {{endpoint: '{}', keyless: true}}\n  - name: files\n    runtime: tool\n    source: ./tool-files.wasm\n  - name: spin\n    runtime: tool\n    source: ./guest-spin-forever.wasm\ninference:\n  model: claude-test\n  driver: {{artifact: anthropic}}\n  max_turns: 20\ncapabilities: {{limits: {{deadline_seconds: 60}}}}\n",
                stub.url()
            ),
        )
        .expect("manifest");
    }
    caps
}

struct RunningHost {
    child: tokio::process::Child,
    root: tempfile::TempDir,
    /// Capsule name → (session id, door URL).
    capsules: HashMap<String, (String, String)>,
}

async fn start_host(i: usize, cluster: &str, stubs: &[StubHandle]) -> RunningHost {
    let root = tempfile::tempdir().expect("tempdir");
    let caps = capsule_folder(root.path(), i, stubs);
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["host", "--json", "--name", &format!("h{i}"), "--cluster", cluster])
        .arg(&caps)
        .current_dir(root.path())
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .env("XDG_CONFIG_HOME", root.path())
        .env_remove("CAPSULE_CONFIG")
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(root.path().join("host.log")).expect("log file"))
        .kill_on_drop(true)
        .spawn()
        .expect("capsule host starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(120), lines.next_line())
        .await
        .expect("ready within 120 s")
        .expect("stdout")
        .expect("a ready line");
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    let ready: Value = serde_json::from_str(&line).expect("ready is JSON");
    let capsules = ready["capsules"]
        .as_array()
        .expect("capsules")
        .iter()
        .map(|c| {
            let name = c["name"].as_str().expect("name").to_string();
            let session = c["session_id"].as_str().unwrap_or_else(|| panic!("{name} runs: {c}")).to_string();
            (name, (session, c["url"].as_str().expect("door").to_string()))
        })
        .collect();
    RunningHost { child, root, capsules }
}

/// Give a task without waiting for it (A2A 0.3 `message/send` with `blocking: false`).
async fn submit(door: &str) {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "do every step"}]},
        "configuration": {"blocking": false}}});
    let answer: Value = reqwest::Client::new()
        .post(format!("{}/a2a", door.trim_end_matches('/')))
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("door answers")
        .json()
        .await
        .expect("json");
    assert!(answer["result"]["id"].is_string(), "accepted: {answer}");
}

async fn trace(js: &async_nats::jetstream::Context, session: &str) -> Vec<Value> {
    let (_, entries) = StreamLog::open(js, session, Record::Trace).await.expect("trace");
    entries.iter().map(|e| serde_json::from_slice(e).expect("json")).collect()
}

fn completed(trace: &[Value]) -> bool {
    trace.iter().any(|e| e["event_type"] == "task_end" && e["exit_status"] == "ok")
}

/// Every line any host's tools appended for capsule `name`: in its own workdir on its first
/// host, and in the claimed session's workdir on a survivor.
fn effects(hosts: &[&Path], name: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for root in hosts {
        for dir in [root.join("capsule-work").join(name), root.join("capsule-work/cluster/sessions").join(name)] {
            let text = std::fs::read_to_string(dir.join("files/effects.txt")).unwrap_or_default();
            lines.extend(text.lines().map(str::to_string));
        }
    }
    lines
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_host_loss_moves_its_sessions_and_every_task_completes_without_a_doubled_effect() {
    let nats = NatsCluster::start(3).await;
    let urls = nats.urls().join(",");
    // Capsule c0-0, on the host that is killed, is in its spinning call at the kill.
    let stubs: Vec<Vec<StubHandle>> =
        (0..HOSTS).map(|i| (0..PER_HOST).map(|k| provider(i == 0 && k == 0)).collect()).collect();
    let mut hosts = Vec::new();
    for (i, s) in stubs.iter().enumerate() {
        hosts.push(start_host(i, &urls, s).await);
    }
    for h in &hosts {
        for (_, door) in h.capsules.values() {
            submit(door).await;
        }
    }
    // Kill host 0 once each of its capsules has appended at least two lines, so every one of
    // its tasks is in the middle, and c0-0's spinning call has started.
    let victim_root = hosts[0].root.path().to_path_buf();
    let victims: Vec<String> = hosts[0].capsules.keys().cloned().collect();
    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let watched = hosts[0].capsules["c0-0"].0.clone();
    let spin_id = format!("call-{SPIN_STEP}");
    let spinning =
        |t: &[Value]| t.iter().any(|e| e["event_type"] == "tool_call_started" && e["tool_call_id"] == spin_id);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !victims.iter().all(|n| effects(&[&victim_root], n).len() >= 2) || !spinning(&trace(&js, &watched).await) {
        assert!(tokio::time::Instant::now() < deadline, "host 0's tasks did not get going within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    hosts[0].child.start_kill().expect("kill -9");
    let _ = hosts[0].child.wait().await;

    let sessions: Vec<(String, String)> =
        hosts.iter().flat_map(|h| h.capsules.iter().map(|(n, (s, _))| (n.clone(), s.clone()))).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    loop {
        let mut pending = Vec::new();
        for (name, session) in &sessions {
            if !completed(&trace(&js, session).await) {
                pending.push(name.clone());
            }
        }
        if pending.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            let (_, first) = sessions.iter().find(|(n, _)| *n == pending[0]).expect("pending");
            let last: Vec<Value> = trace(&js, first).await.into_iter().rev().take(6).collect();
            panic!("tasks not completed within 120 s: {pending:?}; the last events of {}: {last:#?}", pending[0]);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Every session of the lost host is claimed by a survivor (one whose task had already
    // ended too: it is resumed idle).
    let leases = cluster::Leases::open(&js, 3, Duration::from_secs(3)).await.expect("leases");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    for name in &victims {
        let session = &hosts[0].capsules[name].0;
        loop {
            let holder = leases.holder(session).await.expect("lease").map(|h| h.host);
            if matches!(holder.as_deref(), Some("h1" | "h2")) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{name} is not held by a survivor: {holder:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let roots: Vec<&Path> = hosts.iter().map(|h| h.root.path()).collect();
    let mut finished_after_move = 0;
    for (name, session) in &sessions {
        let lines = effects(&roots, name);
        let mut seen = std::collections::HashSet::new();
        for l in &lines {
            assert!(seen.insert(l.clone()), "{name}: the effect `{l}` happened twice: {lines:?}");
        }
        let t = trace(&js, session).await;
        let interrupted: Vec<&Value> =
            t.iter().filter(|e| e["event_type"] == "tool_call" && e["interrupted"] == true).collect();
        if victims.contains(name) {
            // Moved: now leased by a survivor, resumed there, and at most the one call that was
            // running at the kill is reported interrupted.
            let resumed_at = t
                .iter()
                .position(|e| e["event_type"] == "session_start" && e["resumed"] == true)
                .unwrap_or_else(|| panic!("{name} resumed"));
            if t[resumed_at..].iter().any(|e| e["event_type"] == "task_end") {
                finished_after_move += 1;
            }
            assert!(interrupted.len() <= 1, "{name}: {interrupted:?}");
            if *session == watched {
                assert_eq!(interrupted.len(), 1, "the spinning call is reported interrupted: {t:#?}");
                assert_eq!(interrupted[0]["tool_call_id"], spin_id.as_str());
            }
            for call in &interrupted {
                let id = call["tool_call_id"].as_str().expect("id");
                let runs =
                    t.iter().filter(|e| e["event_type"] == "tool_call_started" && e["tool_call_id"] == id).count();
                assert_eq!(runs, 1, "{name}: the interrupted call {id} was not run again");
            }
            // Frame ids continue across the move: strictly increasing, none repeated.
            let (_, frames) = StreamLog::open(&js, session, Record::Frames).await.expect("frames");
            let ids: Vec<u64> = frames
                .iter()
                .filter_map(|f| serde_json::from_slice::<Value>(f).ok().and_then(|v| v["id"].as_u64()))
                .collect();
            assert!(ids.windows(2).all(|w| w[1] > w[0]), "{name}: frame ids {ids:?}");
        } else {
            assert!(interrupted.is_empty(), "{name} never moved: {interrupted:?}");
            assert_eq!(lines.len(), STEPS, "{name} ran every step once: {lines:?}");
        }
    }
    assert!(
        finished_after_move >= PER_HOST / 2,
        "most of the lost host's tasks were mid-way and finished on a survivor: {finished_after_move}"
    );
}
