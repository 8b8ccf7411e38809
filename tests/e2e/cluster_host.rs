//! `capsule host --cluster` with the real binary: a host joins a real 3-node JetStream
//! cluster and its capsules' sessions are leased by it and journaled there; a cluster that is
//! unreachable at start is a coded error naming the URL, exit 2.

use crate::common::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster::{self, Record, StreamLog};
use capsule_stub::Turn;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

fn capsules(root: &std::path::Path, endpoint: &str) -> std::path::PathBuf {
    let caps = root.join("caps");
    let folder = caps.join("alpha");
    std::fs::create_dir_all(&folder).expect("folder");
    let dist = repo().join("components/dist");
    std::fs::write(
        folder.join("murmur.yaml"),
        format!(
            "name: alpha\nversion: 0.1.0\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: {}/driver-anthropic.wasm\n    gateway: {{endpoint: '{endpoint}', keyless: true}}\ninference:\n  model: claude-test\n  driver: {{artifact: anthropic}}\n",
            dist.display()
        ),
    )
    .expect("manifest");
    caps
}

fn host_command(root: &std::path::Path, caps: &std::path::Path, cluster: &str) -> tokio::process::Command {
    let mut c = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"));
    c.args(["host", "--json", "--name", "h1", "--cluster", cluster])
        .arg(caps)
        .current_dir(root)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .env("XDG_CONFIG_HOME", root)
        .env_remove("CAPSULE_CONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true);
    c
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_cluster_at_start_is_a_coded_error_naming_the_url_and_exit_2() {
    let root = tempfile::tempdir().expect("tempdir");
    let caps = capsules(root.path(), "http://127.0.0.1:9");
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let url = format!("nats://127.0.0.1:{port}");
    let out = host_command(root.path(), &caps, &url).output().await.expect("runs");
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("E-CLU-001") && stderr.contains(&url), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_joined_the_cluster_leases_and_journals_its_sessions_there() {
    let c = NatsCluster::start(3).await;
    let stub = stub(vec![Turn::text("hello from the cluster")]);
    let root = tempfile::tempdir().expect("tempdir");
    let caps = capsules(root.path(), &stub.url());
    let mut child = host_command(root.path(), &caps, &c.urls().join(",")).spawn().expect("capsule host starts");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("ready within 60 s")
        .expect("stdout")
        .expect("a ready line");
    let ready: Value = serde_json::from_str(&line).expect("ready is JSON");
    let door = ready["capsules"][0]["url"].as_str().expect("door url").to_string();
    let answer = crate::cluster_support::send_and_wait(&door, "hi").await;
    assert_eq!(answer["result"]["status"]["response"], "hello from the cluster", "{answer}");
    // The session's lease is held by h1, and its conversation is on the cluster.
    let client = cluster::connect(&c.urls()).await.expect("connects");
    let js = async_nats::jetstream::new(client);
    let kv = js.get_key_value("CAPSULE_LEASES").await.expect("the lease bucket exists");
    // Listing keys makes a consumer, which a cluster may be slow to place: tried until it answers.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15);
    let mut keys = loop {
        match kv.keys().await {
            Ok(k) => break futures::StreamExt::collect::<Vec<_>>(k).await,
            Err(e) if tokio::time::Instant::now() < deadline => {
                eprintln!("listing lease keys: {e}; again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("keys: {e}"),
        }
    };
    assert_eq!(keys.len(), 1, "one session: {keys:?}");
    let session = keys.remove(0).expect("key");
    let leases = cluster::Leases::open(&js, 3, Duration::from_secs(3)).await.expect("bucket");
    assert_eq!(leases.holder(&session).await.expect("read").map(|h| h.host), Some("h1".to_string()));
    let (_, conversation) = StreamLog::open(&js, &session, Record::Conversation).await.expect("conversation");
    assert_eq!(conversation.len(), 2, "the user message and the reply");
    let _ = child.start_kill();
}
