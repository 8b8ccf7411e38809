//! Host loss with the real binary: three JetStream servers and three `capsule host --cluster`
//! processes run 30 capsules on multi-turn tasks whose every tool call appends one line to a
//! file. One host is killed (SIGKILL) in the middle of its tasks. The survivors claim its
//! sessions from the cluster (its capsules fetched from the object store into folders of their
//! own) and resume them by the resume rules: every task completes, no tool effect is doubled,
//! a call that was running at the kill is reported interrupted and not run again, and the
//! frame ids of a moved session continue with no repeat.

use crate::cluster_support::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster;
use capsule_stub::StubHandle;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

const HOSTS: usize = 3;
const PER_HOST: usize = 10;

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
            let ids = stored_frame_ids(&js, session).await;
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
