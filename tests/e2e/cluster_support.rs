//! What the process tests of a cluster share: capsules whose tasks append one line per tool
//! call, a provider per capsule, `capsule host --cluster` processes, and reading the records a
//! session left on JetStream.

use crate::common::*;
use capsule_actors::cluster::{Record, StreamLog};
use capsule_stub::{Script, Stub, StubHandle, ToolCall, Turn};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

/// Tool calls per task, one per turn.
pub const STEPS: usize = 8;

/// The step at which the watched capsule calls a tool that runs until its deadline, so that a
/// call is running when its host is killed.
pub const SPIN_STEP: usize = 2;

/// One capsule's provider: `STEPS` turns that each append one line, then a final answer; each
/// answer waits a little, so the tasks are still running when the host is killed. With `spin`,
/// step [`SPIN_STEP`] calls the spinning tool instead.
pub fn provider(spin: bool) -> StubHandle {
    provider_of(STEPS, 250, spin)
}

/// [`provider`] with `steps` tool-call turns, each answer `delay_ms` after its request.
pub fn provider_of(steps: usize, delay_ms: u64, spin: bool) -> StubHandle {
    let mut turns: Vec<Turn> = (0..steps)
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
            delay_ms: Some(delay_ms),
            ..Default::default()
        })
        .collect();
    // The final answer, and spares of it: a provider call made again after a failover or an
    // outage (its first answer was never journaled) takes the next turn of the script.
    for _ in 0..3 {
        turns.push(Turn { text: Some("all steps done".into()), delay_ms: Some(50), ..Default::default() });
    }
    Stub::start(Script::new(turns)).expect("stub starts")
}

/// A host's folder of capsules, each with its components inside it (so the capsule can be
/// kept whole in the cluster's store).
pub fn capsule_folder(root: &Path, host: usize, stubs: &[StubHandle], inference: &str) -> PathBuf {
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
                "name: c{host}-{k}\nversion: 0.1.0\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: ./driver-anthropic.wasm\n    gateway: {{endpoint: '{}', keyless: true}}\n  - name: files\n    runtime: tool\n    source: ./tool-files.wasm\n  - name: spin\n    runtime: tool\n    source: ./guest-spin-forever.wasm\ninference:\n  model: claude-test\n  driver: {{artifact: anthropic}}\n  max_turns: 20\n{inference}capabilities: {{limits: {{deadline_seconds: 60}}}}\n",
                stub.url()
            ),
        )
        .expect("manifest");
    }
    caps
}

pub struct RunningHost {
    /// The process.
    pub child: tokio::process::Child,
    /// Its working folder.
    pub root: tempfile::TempDir,
    /// Its API's token file.
    pub token_file: PathBuf,
    /// Its API's URL.
    pub api: String,
    /// Capsule name → (session id, door URL).
    pub capsules: HashMap<String, (String, String)>,
}

pub async fn start_host(i: usize, cluster: &str, stubs: &[StubHandle]) -> RunningHost {
    start_host_with(i, cluster, stubs, "", None).await
}

/// [`start_host`], with more `inference:` keys in every manifest (indented lines) and a host
/// config (the text of its `host.yaml`).
pub async fn start_host_with(
    i: usize,
    cluster: &str,
    stubs: &[StubHandle],
    inference: &str,
    host_config: Option<&str>,
) -> RunningHost {
    let root = tempfile::tempdir().expect("tempdir");
    let caps = capsule_folder(root.path(), i, stubs, inference);
    if let Some(config) = host_config {
        let dir = root.path().join("capsule-runtime");
        std::fs::create_dir_all(&dir).expect("config folder");
        std::fs::write(dir.join("host.yaml"), config.replace("{ROOT}", &root.path().display().to_string()))
            .expect("host config");
    }
    let name = format!("h{i}");
    let args = ["--name".as_ref(), name.as_ref(), "--cluster".as_ref(), cluster.as_ref(), caps.as_os_str()];
    let mut child = capsule_host(root.path(), &args)
        .stderr(std::fs::File::create(root.path().join("host.log")).expect("log file"))
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
    let token_file = PathBuf::from(ready["token_file"].as_str().expect("token_file"));
    let api = ready["url"].as_str().expect("url").to_string();
    RunningHost { child, root, token_file, api, capsules }
}

/// Give a task without waiting for it (A2A 0.3 `message/send` with `blocking: false`); its id.
pub async fn submit(door: &str) -> String {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "do every step"}]},
        "configuration": {"blocking": false}}});
    let (_, answer) = post_json_body(&format!("{}/a2a", door.trim_end_matches('/')), body.to_string()).await;
    answer["result"]["id"].as_str().unwrap_or_else(|| panic!("accepted: {answer}")).to_string()
}

/// A door request for `session` through a host's API (`POST /sessions/<id>`).
pub async fn via_api(host: &RunningHost, session: &str, request: &Value) -> (u16, Value) {
    api_post(host, &format!("/sessions/{session}"), request).await
}

/// [`via_api`], presenting a door token (`X-Capsule-Door-Token`).
pub async fn via_api_with_door_token(
    host: &RunningHost,
    session: &str,
    door_token: &str,
    request: &Value,
) -> (u16, Value) {
    api_post_with(host, &format!("/sessions/{session}"), request, Some(door_token)).await
}

/// `POST <api><path>` with the host's API token; the status and the JSON answer.
pub async fn api_post(host: &RunningHost, path: &str, body: &Value) -> (u16, Value) {
    api_post_with(host, path, body, None).await
}

async fn api_post_with(host: &RunningHost, path: &str, body: &Value, door_token: Option<&str>) -> (u16, Value) {
    let token = std::fs::read_to_string(&host.token_file).expect("token");
    let mut request = reqwest::Client::new().post(format!("{}{path}", host.api)).bearer_auth(token.trim()).json(body);
    if let Some(door) = door_token {
        request = request.header("x-capsule-door-token", door);
    }
    let answer = request.send().await.expect("the host API answers");
    let status = answer.status().as_u16();
    (status, answer.json().await.expect("json"))
}

/// A task through a door's own `message/send`, waiting for its end; the JSON-RPC answer.
pub async fn send_and_wait(door: &str, text: &str) -> Value {
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"messageId": "m1", "role": "user", "parts": [{"text": text}]}}});
    post_json_body(door, body.to_string()).await.1
}

/// The ids of the frames a session stored on JetStream, in stored order (each entry one frame
/// or a batch of them).
pub async fn stored_frame_ids(js: &async_nats::jetstream::Context, session: &str) -> Vec<u64> {
    let (_, entries) = StreamLog::open(js, session, Record::Frames).await.expect("frames");
    entries
        .iter()
        .flat_map(|e| capsule_actors::cluster::frames::frames_of(e).unwrap_or_else(|| panic!("a frames entry: {e:?}")))
        .filter_map(|f| f.id)
        .collect()
}

pub async fn trace(js: &async_nats::jetstream::Context, session: &str) -> Vec<Value> {
    let (_, entries) = StreamLog::open(js, session, Record::Trace).await.expect("trace");
    entries.iter().map(|e| serde_json::from_slice(e).expect("json")).collect()
}

pub fn completed(trace: &[Value]) -> bool {
    trace.iter().any(|e| e["event_type"] == "task_end" && e["exit_status"] == "ok")
}

/// Wait until capsule `name`'s task on `host` has made two tool calls, then kill the host
/// (SIGKILL) mid-task.
pub async fn kill_once_going(host: &mut RunningHost, name: &str) {
    let root = host.root.path().to_path_buf();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while effects(&[&root], name).len() < 2 {
        assert!(tokio::time::Instant::now() < deadline, "the task did not get going within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    host.child.start_kill().expect("kill -9");
    let _ = host.child.wait().await;
}

/// Every line any host's tools appended for capsule `name`: in its own workdir on its first
/// host, and in the claimed session's workdir on a survivor.
pub fn effects(hosts: &[&Path], name: &str) -> Vec<String> {
    let mut lines = Vec::new();
    for root in hosts {
        for dir in [root.join("capsule-work").join(name), root.join("capsule-work/cluster/sessions").join(name)] {
            let text = std::fs::read_to_string(dir.join("files/effects.txt")).unwrap_or_default();
            lines.extend(text.lines().map(str::to_string));
        }
    }
    lines
}

/// One entry of a record on JetStream: its stream sequence, its JSON, and the id of the writer
/// that appended it (the first part of its deduplication id: one per open of the record).
pub struct StoredEntry {
    pub sequence: u64,
    pub value: Value,
    pub writer: String,
}

/// A record's entries on JetStream, in order, one per record (a batch's records each with
/// the batch's sequence).
pub async fn stored_entries(js: &async_nats::jetstream::Context, session: &str, record: Record) -> Vec<StoredEntry> {
    let subject = capsule_actors::cluster::subject(session, record).expect("subject");
    let stream = js.get_stream(capsule_actors::cluster::JOURNAL_STREAM).await.expect("stream");
    let mut out = Vec::new();
    let mut next = 1;
    while let Ok(m) = stream.get_first_raw_message_by_subject(&subject, next).await {
        let id = m.headers.get("Nats-Msg-Id").map(|v| v.as_str().to_string()).unwrap_or_default();
        let writer = id.split(':').next().unwrap_or_default().to_string();
        // A batch's records share its entry's sequence and writer.
        for record in capsule_actors::cluster::records_of(&m.payload).expect("an entry of this runtime") {
            out.push(StoredEntry {
                sequence: m.sequence,
                value: serde_json::from_slice(record).expect("json"),
                writer: writer.clone(),
            });
        }
        next = m.sequence + 1;
    }
    out
}

/// A record's entries on JetStream, each with the id of the writer that appended it.
pub async fn entries_with_writers(
    js: &async_nats::jetstream::Context,
    session: &str,
    record: Record,
) -> Vec<(Value, String)> {
    stored_entries(js, session, record).await.into_iter().map(|e| (e.value, e.writer)).collect()
}

/// The host's capsules as its API lists them.
pub async fn api_list(host: &RunningHost) -> Vec<Value> {
    let token = std::fs::read_to_string(&host.token_file).expect("token");
    reqwest::Client::new()
        .get(format!("{}/capsules", host.api))
        .bearer_auth(token.trim())
        .send()
        .await
        .expect("the host API answers")
        .json()
        .await
        .expect("json")
}
