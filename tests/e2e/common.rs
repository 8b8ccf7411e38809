//! Test helpers: the sandbox host with a shared on-disk component cache, a capsule builder that
//! writes a manifest into a temporary folder, and frame collection with a deadline.

#![allow(dead_code)]

use capsule_actors::{LaunchError, LaunchOptions, Session, TaskOutcome};
use capsule_protocol::frame::{Frame, SharedFrame};
use capsule_runtime::{Host, HostOptions};
use capsule_stub::{Script, Stub, StubHandle, Turn};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio::sync::mpsc;

/// The repository root.
pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A committed component.
pub fn dist(name: &str) -> PathBuf {
    repo().join("components/dist").join(format!("{name}.wasm"))
}

/// `capsule host --json <args…>` started in `root` as on a fresh machine (`root` is its config
/// folder, no `CAPSULE_CONFIG`), with the tests' component cache; stdout and stderr piped, killed
/// when dropped.
pub fn capsule_host(root: &Path, args: &[&std::ffi::OsStr]) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"));
    c.args(["host", "--json"])
        .args(args)
        .current_dir(root)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .env("XDG_CONFIG_HOME", root)
        .env_remove("CAPSULE_CONFIG")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true);
    c
}

/// A host whose compiled components are shared by every test process.
pub fn host() -> Host {
    Host::new(HostOptions { cache_dir: Some(repo().join("target/test-component-cache")) }).expect("host starts")
}

/// What a test host's capsules share: this test's engine and cache, no host config, no
/// machine meter, doors on loopback without TLS, and two shards, as `capsule host` has on
/// this machine.
pub fn loopback_shared() -> capsule_actors::host::Shared {
    capsule_actors::host::Shared {
        shards: Some(std::sync::Arc::new(capsule_actors::shards::Shards::new(2).expect("shards"))),
        cluster: None,
        host: host(),
        env: Default::default(),
        host_config: None,
        machine: None,
        bind: [127, 0, 0, 1].into(),
        tls: None,
    }
}

/// A capsule in a temporary folder.
pub struct Capsule {
    pub dir: tempfile::TempDir,
    pub workdir: PathBuf,
}

impl Capsule {
    /// Write `yaml` as the folder's murmur.yaml. `{DIST}` is replaced by the dist folder.
    pub fn new(yaml: &str) -> Capsule {
        let dir = tempfile::tempdir().expect("tempdir");
        let yaml = yaml
            .replace("{DIST}", &repo().join("components/dist").display().to_string())
            .replace("{ARTIFACTS}", &repo().join("components/artifacts").display().to_string());
        std::fs::write(dir.path().join("murmur.yaml"), yaml).expect("write manifest");
        let workdir = dir.path().join("work");
        Capsule { dir, workdir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    pub fn options(&self, env: HashMap<String, String>) -> LaunchOptions {
        LaunchOptions {
            cluster: None,
            manifest: self.dir.path().to_path_buf(),
            workdir: self.workdir.clone(),
            host: host(),
            env,
            endpoint_override: None,
            machine: None,
            host_config: None,
        }
    }

    pub async fn launch(&self) -> Result<Session, LaunchError> {
        Session::launch(self.options(HashMap::new())).await
    }

    pub async fn launch_with_env(&self, env: &[(&str, &str)]) -> Result<Session, LaunchError> {
        Session::launch(self.options(env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect())).await
    }
}

/// A capsule with the real Anthropic driver pointed at `endpoint`, keyless, plus `tools`
/// (`name: source` pairs where source is relative to the dist folder, e.g. `tool-files.wasm`)
/// and `extra` YAML appended at the top level.
pub fn anthropic_capsule(endpoint: &str, tools: &[(&str, &str)], extra: &str) -> Capsule {
    let mut y = format!(
        "name: test-capsule\nversion: 0.1.0\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: {{DIST}}/driver-anthropic.wasm\n    gateway: {{endpoint: '{endpoint}', keyless: true}}\n"
    );
    for (name, source) in tools {
        y.push_str(&format!("  - name: {name}\n    runtime: tool\n    source: {source}\n"));
    }
    y.push_str("inference:\n  model: claude-test\n  driver: {artifact: anthropic}\n");
    y.push_str(extra);
    Capsule::new(&y)
}

/// Start the stub with these turns.
pub fn stub(turns: Vec<Turn>) -> StubHandle {
    Stub::start(Script::new(turns)).expect("stub starts")
}

/// Read frames until the final status of `task_id` (or panic after 30 s).
pub async fn frames_until_final(rx: &mut mpsc::Receiver<SharedFrame>, task_id: &str) -> Vec<SharedFrame> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let f =
            tokio::time::timeout_at(deadline, rx.recv()).await.expect("final status within 30 s").expect("stream open");
        let done = matches!(&f.frame, Frame::Status { id, is_final: true, .. } if id == task_id);
        out.push(f);
        if done {
            return out;
        }
    }
}

/// Submit a task with a subscription opened first; returns the outcome and its frames.
pub async fn run_task(session: &Session, text: &str) -> (TaskOutcome, Vec<SharedFrame>) {
    let mut rx = session.subscribe(None).await.expect("subscribe");
    let outcome = session.submit(text).await.expect("loop answers");
    let frames = frames_until_final(&mut rx, &outcome.task_id).await;
    (outcome, frames)
}

/// The trace lines of a session.
pub fn trace(session: &Session) -> Vec<serde_json::Value> {
    std::fs::read_to_string(session.dir.join("trace.jsonl"))
        .expect("trace exists")
        .lines()
        .map(|l| serde_json::from_str(l).expect("trace line is JSON"))
        .collect()
}

/// Poll `f` until it is true or 10 s pass.
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

/// Make a FIFO at `path`. Opening it to read blocks until a writer comes, as a stalled disk
/// would hold a file operation.
pub fn make_fifo(path: &Path) {
    rustix::fs::mkfifoat(rustix::fs::CWD, path, rustix::fs::Mode::from_raw_mode(0o600)).expect("fifo");
}

/// Open the FIFO at `path` to write, without blocking: a reader's open then finishes (and, as a
/// FIFO cannot be read at an offset, the tool's read fails).
pub fn unblock_fifo(path: &Path) -> std::fs::File {
    use std::os::unix::fs::OpenOptionsExt;
    let nonblocking = rustix::fs::OFlags::NONBLOCK.bits() as i32;
    std::fs::OpenOptions::new().write(true).custom_flags(nonblocking).open(path).expect("writer")
}

/// Whether a thread of `process` (a pid, or `self`) sleeps in the kernel function `wchan`, as
/// /proc names it.
pub fn a_thread_waits_in(process: impl std::fmt::Display, wchan: &str) -> bool {
    threads_of(process).iter().any(|t| t.wchan == wchan)
}

/// One thread of a process, as /proc shows it: its name, the kernel function it sleeps in and
/// the CPUs it may run on (`Cpus_allowed_list`).
#[derive(Debug)]
pub struct Thread {
    pub name: String,
    pub wchan: String,
    pub cpus: String,
}

/// The threads of `process` (a pid, or `self`); none when it is gone.
pub fn threads_of(process: impl std::fmt::Display) -> Vec<Thread> {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{process}/task")) else { return Vec::new() };
    tasks
        .flatten()
        .map(|t| {
            let read = |f: &str| std::fs::read_to_string(t.path().join(f)).unwrap_or_default().trim().to_string();
            Thread { name: read("comm"), wchan: read("wchan"), cpus: cpus_allowed(&t.path().join("status")) }
        })
        .collect()
}

/// `Cpus_allowed_list` of a /proc `status` file.
pub fn cpus_allowed(status: &std::path::Path) -> String {
    let text = std::fs::read_to_string(status).unwrap_or_default();
    text.lines().find_map(|l| l.strip_prefix("Cpus_allowed_list:")).unwrap_or_default().trim().to_string()
}

#[allow(unused_imports, reason = "not every suite that includes this file posts")]
pub use crate::http_support::post_json_body;
