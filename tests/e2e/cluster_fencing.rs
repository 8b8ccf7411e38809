//! Fencing with the real binary: a host stopped (SIGSTOP) for longer than its lease TTL loses
//! its sessions to a survivor, which resumes them. When the stopped host is let go on
//! (SIGCONT), it stops those sessions, and the stream shows no entry from it after the new
//! owner's first one: every later entry of each moved session's trace was appended by the new
//! owner's journal.

use crate::cluster_support::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster::{self, Record};
use capsule_stub::StubHandle;
use std::time::Duration;

fn signal(pid: u32, sig: &str) {
    let ok = std::process::Command::new("kill").args([sig, &pid.to_string()]).status().expect("kill runs").success();
    assert!(ok, "kill {sig} {pid}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_host_stopped_past_its_ttl_is_fenced_and_stops_its_sessions_when_it_wakes() {
    let nats = NatsCluster::start(3).await;
    let urls = nats.urls().join(",");
    let stubs0: Vec<StubHandle> = (0..2).map(|_| provider(false)).collect();
    let stubs1: Vec<StubHandle> = vec![provider(false)];
    let mut h0 = start_host(0, &urls, &stubs0).await;
    let _h1 = start_host(1, &urls, &stubs1).await;
    for (_, door) in h0.capsules.values() {
        submit(door).await;
    }
    let root0 = h0.root.path().to_path_buf();
    let names: Vec<String> = h0.capsules.keys().cloned().collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !names.iter().all(|n| effects(&[&root0], n).len() >= 2) {
        assert!(tokio::time::Instant::now() < deadline, "the tasks did not get going within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let pid = h0.child.id().expect("pid");
    signal(pid, "-STOP");

    // Past the TTL, host 1 holds every session of host 0 and finishes its task.
    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let leases = cluster::Leases::open(&js, 3, Duration::from_secs(3)).await.expect("leases");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    for name in &names {
        let session = &h0.capsules[name].0;
        loop {
            let holder = leases.holder(session).await.expect("lease").map(|h| h.host);
            if holder.as_deref() == Some("h1") && completed(&trace(&js, session).await) {
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{name} did not move to h1 and finish: {holder:?}");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    signal(pid, "-CONT");
    // Woken, host 0 finds its leases lost and stops those sessions (its slots then start new
    // ones, by its restart policy).
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let list = api_list(&h0).await;
        let stopped = names.iter().all(|n| {
            let e = list.iter().find(|e| e["name"] == n.as_str()).expect("listed");
            // Stopped: replaced by a new session, or waiting to be (crashed, failed).
            e["session_id"].as_str() != Some(h0.capsules[n].0.as_str()) || e["state"] != "running"
        });
        if stopped {
            break;
        }
        assert!(tokio::time::Instant::now() < deadline, "host 0 did not stop its lost sessions: {list:#?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    for name in &names {
        let session = &h0.capsules[name].0;
        let entries = entries_with_writers(&js, session, Record::Trace).await;
        let taken = entries
            .iter()
            .position(|(e, _)| e["event_type"] == "session_start" && e["resumed"] == true)
            .unwrap_or_else(|| panic!("{name} was resumed by h1"));
        assert_eq!(entries[taken].0["cluster"]["host"], "h1", "{name}");
        let new_owner = &entries[taken].1;
        assert!(!new_owner.is_empty(), "entries carry their writer");
        for (e, writer) in &entries[taken..] {
            assert_eq!(writer, new_owner, "{name}: an entry after the move came from another writer: {e}");
        }
        assert!(entries[..taken].iter().all(|(_, w)| w != new_owner), "{name}: the old owner's entries are its own");
    }
    let _ = h0.child.start_kill();
}
