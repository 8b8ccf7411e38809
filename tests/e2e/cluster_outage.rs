//! NATS faults under running sessions, with the real binary:
//! - one of the three servers (the journal stream's leader, unless it leads the lease bucket) is
//!   killed mid-task: the sessions go on, none is stopped, and their tasks complete;
//! - every server is down for longer than the lease TTL: no step is taken without an ack; the
//!   host stops each session once its lease's TTL ran out by its own clock; when the servers are
//!   back a host claims each again, and every task completes with no tool effect doubled.

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
    // The server to lose: the journal stream's leader (the host is connected to it), unless it
    // also leads the lease bucket. JetStream elects a lost leader's successor after 4–9 s, longer
    // than the 3 s lease TTL, so losing the leases' leader lets every lease lapse and the
    // sessions move (docs/cluster.md, "Failover"); here the sessions must simply go on.
    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let leader = |stream: &'static str| {
        let js = js.clone();
        async move {
            let mut s = js.get_stream(stream).await.expect("stream");
            s.info().await.expect("info").cluster.clone().and_then(|c| c.leader).expect("a leader")
        }
    };
    let (journal, leases) = (leader(cluster::JOURNAL_STREAM).await, leader("KV_CAPSULE_LEASES").await);
    let lost = if journal != leases {
        journal
    } else {
        (0..3).map(|i| format!("n{i}")).find(|n| *n != leases).expect("another")
    };
    let i: usize = lost.trim_start_matches('n').parse().expect("servers are named n<i>");
    nats.kill(i);
    let urls: Vec<String> = nats.urls().into_iter().enumerate().filter(|(j, _)| *j != i).map(|(_, u)| u).collect();
    let js = async_nats::jetstream::new(cluster::connect(&urls).await.expect("connects"));
    let sessions: Vec<String> = h.capsules.values().map(|(s, _)| s.clone()).collect();
    wait_completed(&js, &sessions, Duration::from_secs(90), &h).await;
    no_doubles(h.root.path(), &names);
    // They went on: none was stopped and claimed again.
    for s in &sessions {
        let resumed =
            trace(&js, s).await.iter().filter(|e| e["event_type"] == "session_start" && e["resumed"] == true).count();
        assert_eq!(resumed, 0, "{s} was stopped and resumed instead of going on");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_sessions_outlive_every_server_going_down_for_longer_than_the_ttl() {
    let mut nats = NatsCluster::start(3).await;
    let stubs: Vec<StubHandle> = (0..2).map(|_| provider(false)).collect();
    let (h, names) = busy_host(&nats, &stubs).await;
    for i in 0..3 {
        nats.kill(i);
    }
    let down = tokio::time::Instant::now();
    let sessions: Vec<String> = h.capsules.values().map(|(s, _)| s.clone()).collect();
    // Longer than the 3 s TTL. Meanwhile no step can be journaled, so none is taken.
    let during: Vec<usize> = names.iter().map(|n| effects(&[h.root.path()], n).len()).collect();
    // Unable to renew, the host stops each session once its lease's TTL has run out by its own
    // clock, without waiting for the servers to answer.
    let log = h.root.path().join("host.log");
    let stopped = |s: &str| {
        std::fs::read_to_string(&log)
            .unwrap_or_default()
            .lines()
            .any(|l| l.contains(s) && l.contains("E-CLU-006") && l.contains("not renewed within its TTL"))
    };
    while !sessions.iter().all(|s| stopped(s)) {
        assert!(down.elapsed() < Duration::from_secs(15), "the sessions were not stopped when their leases ran out");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(5).saturating_sub(down.elapsed())).await;
    let after: Vec<usize> = names.iter().map(|n| effects(&[h.root.path()], n).len()).collect();
    assert!(
        after.iter().zip(&during).all(|(a, d)| *a <= d + 1),
        "at most the call already started ran: {during:?} → {after:?}"
    );
    nats.restart_all().await;
    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    wait_completed(&js, &sessions, Duration::from_secs(120), &h).await;
    no_doubles(h.root.path(), &names);
    // A session whose lease expired during the outage was stopped and claimed again (here by
    // the same host, the only one), and nothing came from its old writer after the claim.
    let mut claimed = 0;
    for s in &sessions {
        let entries = entries_with_writers(&js, s, capsule_actors::cluster::Record::Trace).await;
        if let Some(k) = entries.iter().position(|(e, _)| e["event_type"] == "session_start" && e["resumed"] == true) {
            claimed += 1;
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
    // Every session was stopped: each was claimed again, so the check above ran for each.
    assert_eq!(claimed, sessions.len(), "every session stopped during the outage is claimed again");
}
