//! NATS faults under running sessions, with the real binary:
//! - one of the three servers is killed mid-task: the sessions go on and their tasks complete;
//! - every server is down for longer than the lease TTL: no step is taken without an ack; when
//!   the servers are back, a session whose lease expired meanwhile stops and a host claims it
//!   again (one whose lease the restarted servers still hold goes on under it), and every task
//!   completes with no tool effect doubled.

use crate::cluster_support::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster;
use capsule_stub::StubHandle;
use std::time::Duration;

async fn wait_completed(
    js: &async_nats::jetstream::Context,
    sessions: &[String],
    within: Duration,
    host: &RunningHost,
) {
    let deadline = tokio::time::Instant::now() + within;
    for s in sessions {
        loop {
            // A read may fail while the cluster elects its leaders again.
            let done =
                match capsule_actors::cluster::StreamLog::open(js, s, capsule_actors::cluster::Record::Trace).await {
                    Ok((_, entries)) => {
                        completed(&entries.iter().filter_map(|e| serde_json::from_slice(e).ok()).collect::<Vec<_>>())
                    }
                    Err(_) => false,
                };
            if done {
                break;
            }
            if tokio::time::Instant::now() >= deadline {
                let log = std::fs::read_to_string(host.root.path().join("host.log")).unwrap_or_default();
                let tail: Vec<&str> = log
                    .lines()
                    .filter(|l| {
                        !l.trim_start().starts_with("at ")
                            && !l.trim_start().chars().next().is_some_and(|c| c.is_ascii_digit())
                    })
                    .rev()
                    .take(60)
                    .collect();
                let t = trace(js, s).await;
                let kinds: Vec<&str> = t.iter().map(|e| e["event_type"].as_str().unwrap_or("?")).collect();
                panic!(
                    "{s} did not complete within {within:?}; its trace: {kinds:?}; the host's log, newest first: {tail:#?}"
                );
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

/// A host running one capsule per stub, each given a task that has made its first tool call.
async fn busy_host(nats: &NatsCluster, stubs: &[StubHandle]) -> (RunningHost, Vec<String>) {
    let h = start_host(0, &nats.urls().join(","), stubs).await;
    for (_, door) in h.capsules.values() {
        submit(door).await;
    }
    let names: Vec<String> = h.capsules.keys().cloned().collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !names.iter().all(|n| !effects(&[h.root.path()], n).is_empty()) {
        assert!(tokio::time::Instant::now() < deadline, "the tasks did not get going within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (h, names)
}

fn no_doubles(root: &std::path::Path, names: &[String]) {
    for n in names {
        let lines = effects(&[root], n);
        let unique: std::collections::HashSet<&String> = lines.iter().collect();
        assert_eq!(unique.len(), lines.len(), "{n}: an effect happened twice: {lines:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_losing_one_of_three_servers_mid_task_does_not_stop_the_sessions() {
    let mut nats = NatsCluster::start(3).await;
    let stubs: Vec<StubHandle> = (0..3).map(|_| provider(false)).collect();
    let (h, names) = busy_host(&nats, &stubs).await;
    nats.kill(0);
    let urls = nats.urls()[1..].to_vec();
    let js = async_nats::jetstream::new(cluster::connect(&urls).await.expect("connects"));
    let sessions: Vec<String> = h.capsules.values().map(|(s, _)| s.clone()).collect();
    wait_completed(&js, &sessions, Duration::from_secs(90), &h).await;
    no_doubles(h.root.path(), &names);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_sessions_outlive_every_server_going_down_for_longer_than_the_ttl() {
    let mut nats = NatsCluster::start(3).await;
    let stubs: Vec<StubHandle> = (0..2).map(|_| provider(false)).collect();
    let (h, names) = busy_host(&nats, &stubs).await;
    for i in 0..3 {
        nats.kill(i);
    }
    // Longer than the 3 s TTL. Meanwhile no step can be journaled, so none is taken.
    let during: Vec<usize> = names.iter().map(|n| effects(&[h.root.path()], n).len()).collect();
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after: Vec<usize> = names.iter().map(|n| effects(&[h.root.path()], n).len()).collect();
    assert!(
        after.iter().zip(&during).all(|(a, d)| *a <= d + 1),
        "at most the call already started ran: {during:?} → {after:?}"
    );
    nats.restart_all().await;
    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let sessions: Vec<String> = h.capsules.values().map(|(s, _)| s.clone()).collect();
    wait_completed(&js, &sessions, Duration::from_secs(120), &h).await;
    no_doubles(h.root.path(), &names);
    // A session whose lease expired during the outage was stopped and claimed again (here by
    // the same host, the only one), and nothing came from its old writer after the claim; one
    // whose lease survived went on under it.
    for s in &sessions {
        let entries = entries_with_writers(&js, s, capsule_actors::cluster::Record::Trace).await;
        if let Some(k) = entries.iter().position(|(e, _)| e["event_type"] == "session_start" && e["resumed"] == true) {
            let owner = &entries[k].1;
            let old: std::collections::HashSet<&String> = entries[..k].iter().map(|(_, w)| w).collect();
            let listing: Vec<(String, bool)> = entries
                .iter()
                .map(|(e, w)| (e["event_type"].as_str().unwrap_or("?").to_string(), old.contains(w) && w != owner))
                .collect();
            assert!(
                entries[k..].iter().all(|(_, w)| !old.contains(w) || w == owner),
                "{s}: an entry after the claim came from the old writer (event, from an old writer): {listing:?}"
            );
        }
    }
}
