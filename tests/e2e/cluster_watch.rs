//! Watching across a failover with the real binaries: `capsule watch <B's API> --session <id>`
//! follows, through host B's API, a session that runs on host A. Host A is killed mid-task; host B claims the session and
//! finishes it. The watcher sees every frame id once, in order, with no gap, across the move,
//! and so does a client that reconnects afterwards with `Last-Event-ID` set to one of A's frames;
//! a door request sent to B's API for that session reaches its owner's door, before the move
//! and after it.

use crate::cluster_support::*;
use crate::common::repo;
use crate::nats::NatsCluster;
use capsule_actors::cluster;
use capsule_stub::StubHandle;
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, BufReader};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_watcher_on_another_host_sees_every_frame_once_in_order_across_a_failover() {
    let nats = NatsCluster::start(3).await;
    let urls = nats.urls().join(",");
    let stubs_a: Vec<StubHandle> = vec![provider(false)];
    let stubs_b: Vec<StubHandle> = vec![provider(false)];
    let mut a = start_host(0, &urls, &stubs_a).await;
    let b = start_host(1, &urls, &stubs_b).await;
    let (name, (session, door)) = a.capsules.iter().next().map(|(n, s)| (n.clone(), s.clone())).expect("one capsule");

    let mut watcher = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["watch", "--json", &b.api, "--session", &session, "--token-file"])
        .arg(&b.token_file)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("capsule watch starts");
    let mut lines = BufReader::new(watcher.stdout.take().expect("stdout")).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line()).await.expect("ack within 30 s");
    let ack: Value = serde_json::from_str(&first.expect("stdout").expect("a line")).expect("json");
    assert_eq!(ack["event"], "connection-ack", "{ack}");

    // Host B lists the whole cluster: its own capsule, and A's session on A.
    let listed = api_list(&b).await;
    let on_a = listed.iter().find(|e| e["session_id"] == session.as_str()).expect("A's session is listed on B");
    assert_eq!((on_a["host"].as_str(), on_a["state"].as_str()), (Some("h0"), Some("running")), "{listed:#?}");
    assert!(listed.iter().any(|e| e["host"] == "h1" && e["name"] == "c1-0"), "{listed:#?}");

    let task = submit(&door).await;
    // A door request for A's session through B's API reaches A's door.
    let get = serde_json::json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task}});
    let (status, through_b) = via_api(&b, &session, &get).await;
    assert_eq!(status, 200, "{through_b}");
    assert_eq!(through_b["result"]["id"], task.as_str(), "{through_b}");
    kill_once_going(&mut a, &name).await;
    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    // What A stored before it died (the lease outlives it by up to a TTL, so nobody else has
    // written yet).
    let by_a = stored_frame_ids(&js, &session).await;
    assert!(!by_a.is_empty(), "A stored frames before the kill");

    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !completed(&trace(&js, &session).await) {
        assert!(tokio::time::Instant::now() < deadline, "the task did not complete on host B within 60 s");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let stored = stored_frame_ids(&js, &session).await;
    assert_eq!(stored, (1..=stored.len() as u64).collect::<Vec<_>>(), "stored once each, in order");
    let last_stored = *stored.last().expect("frames were stored");

    let mut ids = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while ids.last() != Some(&last_stored) {
        let line = tokio::time::timeout_at(deadline, lines.next_line())
            .await
            .unwrap_or_else(|_| panic!("the watcher reached frame {last_stored} within 30 s; it has {ids:?}"))
            .expect("stdout")
            .expect("the watcher is still running");
        let frame: Value = serde_json::from_str(&line).expect("json");
        if let Some(id) = frame["id"].as_u64() {
            ids.push(id);
        }
    }
    let expected: Vec<u64> = (1..=last_stored).collect();
    assert_eq!(ids, expected, "every frame id once, in order, across the move");
    // A client reconnecting through B with `Last-Event-ID` set to one of A's frames gets every
    // frame after it once, in order: A's rest, then the new owner's.
    let from = by_a[by_a.len() / 2];
    assert!(last_stored > *by_a.last().expect("A's frames"), "the new owner stored frames too");
    let replayed = replay_after(&b, &session, from, last_stored).await;
    assert_eq!(replayed, (from + 1..=last_stored).collect::<Vec<_>>(), "after {from}: no gap, no repeat");
    let resumed = trace(&js, &session).await;
    assert!(resumed.iter().any(|e| e["event_type"] == "session_start" && e["cluster"]["host"] == "h1"), "moved to h1");
    // After the move the same request through B's API reaches the new owner's door, which
    // resumed the task and finished it.
    let (status, after) = via_api(&b, &session, &get).await;
    assert_eq!(status, 200, "{after}");
    assert_eq!(after["result"]["status"]["state"], "completed", "{after}");
    let listed = api_list(&b).await;
    let moved = listed.iter().find(|e| e["session_id"] == session.as_str()).expect("still listed");
    assert_eq!(moved["host"], "h1", "after the move B runs it: {listed:#?}");
    let _ = watcher.start_kill();
}

/// The frame ids of a `stream/watch` through `host`'s API with `Last-Event-ID: after`, read
/// until frame `until`.
async fn replay_after(host: &RunningHost, session: &str, after: u64, until: u64) -> Vec<u64> {
    use futures::StreamExt;
    let token = std::fs::read_to_string(&host.token_file).expect("token");
    let resp = reqwest::Client::new()
        .post(format!("{}/sessions/{session}", host.api))
        .bearer_auth(token.trim())
        .header("last-event-id", after.to_string())
        .json(&serde_json::json!({"jsonrpc": "2.0", "id": 3, "method": "stream/watch"}))
        .send()
        .await
        .expect("the host API answers");
    assert_eq!(resp.status().as_u16(), 200);
    let (mut text, mut body) = (String::new(), resp.bytes_stream());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !text.contains(&format!("id: {until}\n")) {
        match tokio::time::timeout_at(deadline, body.next()).await {
            Ok(Some(chunk)) => text.push_str(&String::from_utf8_lossy(&chunk.expect("chunk"))),
            Ok(None) => panic!("the replay ended before frame {until}: {text}"),
            Err(_) => panic!("the replay did not reach frame {until} within 30 s: {text}"),
        }
    }
    text.lines().filter_map(|l| l.strip_prefix("id: ")).map(|n| n.trim().parse().expect("a numeric id")).collect()
}
