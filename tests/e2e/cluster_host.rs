//! `capsule host --cluster` with the real binary: a host joins a real 3-node JetStream
//! cluster (here from its host file's `cluster:`) and its capsules' sessions are leased by it
//! and journaled there; a cluster that is
//! unreachable at start is a coded error naming the URL, exit 2; a host's claimer lists the
//! session book and the leases once a round, and reads no single session while all are held.

use crate::common::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster::{self, Record, StreamLog};
use capsule_stub::Turn;
use futures::StreamExt;
use serde_json::Value;
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
    capsule_host(root, &["--name".as_ref(), "h1".as_ref(), "--cluster".as_ref(), cluster.as_ref(), caps.as_os_str()])
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
    capsules(root.path(), &stub.url());
    // Joined from the host file's `cluster:` (the other tests use `--cluster`): its servers and
    // this host's name.
    let host_file = root.path().join("host.yaml");
    let yaml =
        format!("capsules:\n  - path: ./caps/alpha\ncluster:\n  servers: '{}'\n  name: h1\n", c.urls().join(","));
    std::fs::write(&host_file, yaml).expect("host file");
    let mut child = capsule_host(root.path(), &[host_file.as_os_str()]).spawn().expect("capsule host starts");
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

/// Whether a JetStream API request reads one entry of the session book or one lease.
fn reads_one_session(subject: &str) -> bool {
    ["$JS.API.DIRECT.GET.", "$JS.API.STREAM.MSG.GET."].iter().any(|get| {
        subject
            .strip_prefix(get)
            .is_some_and(|bucket| bucket.starts_with("KV_CAPSULE_SESSIONS") || bucket.starts_with("KV_CAPSULE_LEASES"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claimer_round_over_held_sessions_reads_no_session_entry_and_no_lease() {
    let c = NatsCluster::start(3).await;
    let stubs: Vec<_> = (0..6).map(|_| crate::cluster_support::provider(false)).collect();
    let host = crate::cluster_support::start_host(0, &c.urls().join(","), &stubs).await;
    assert_eq!(host.capsules.len(), 6, "six sessions, booked and leased by h0");
    // Every request to JetStream's API is a message on `$JS.API.…`, and every heartbeat (one at
    // the start of each claimer round) a message on the hosts bucket's subject.
    let client = cluster::connect(&c.urls()).await.expect("connects");
    let mut api = client.subscribe("$JS.API.>").await.expect("subscribe to the API");
    let mut beats = client.subscribe("$KV.CAPSULE_HOSTS.>").await.expect("subscribe to heartbeats");
    client.flush().await.expect("flush");
    let (mut seen, mut reads, mut listings) = (0, Vec::new(), 0);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    // From the first heartbeat to the third: two whole rounds.
    while seen < 3 {
        tokio::select! {
            beat = beats.next() => {
                beat.expect("heartbeats go on");
                seen += 1;
            }
            Some(request) = api.next() => {
                if seen >= 1 {
                    let subject = request.subject.as_str();
                    listings += usize::from(subject.starts_with("$JS.API.CONSUMER.") && subject.contains("KV_CAPSULE_LEASES"));
                    if reads_one_session(subject) {
                        reads.push(request.subject.to_string());
                    }
                }
            }
            _ = tokio::time::sleep_until(deadline) => panic!("only {seen} heartbeats within 60 s"),
        }
    }
    // The subscription sees this bucket's API traffic: each round lists the leases.
    assert!(listings >= 2, "two rounds listed the leases {listings} times");
    assert!(reads.is_empty(), "two rounds over 6 held sessions read single sessions: {reads:?}");
}
