//! Placement with the real binary: `POST /capsules` on any host of a cluster stores the capsule
//! and runs it on the least-loaded live host of the registry (ties by name), which never saw
//! its folder; the registry names each host's doors and leaves out an entry in another format; the placed capsule answers tasks through its door, and the next placement goes
//! to the host that is now the least loaded.

use crate::cluster_support::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster;
use capsule_stub::{Script, Stub, StubHandle, Turn};
use serde_json::{Value, json};
use std::time::Duration;

async fn place(host: &RunningHost, body: Value) -> Value {
    api_post(host, "/capsules", &body).await.1
}

/// Wait until the registry shows every host with the given loads, and as many doors.
async fn loads_become(hosts: &cluster::Hosts, want: &[(&str, u32)]) -> Vec<cluster::HostEntry> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let live = hosts.live().await.unwrap_or_default();
        let shown = |h: &cluster::HostEntry, n: &str, l: u32| {
            h.name == n && h.load == l && h.api.is_some() && h.doors.len() == l as usize
        };
        if want.iter().all(|(n, l)| live.iter().any(|h| shown(h, n, *l))) {
            return live;
        }
        assert!(tokio::time::Instant::now() < deadline, "the registry shows {live:?}, not {want:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_capsule_posted_to_any_host_runs_on_the_least_loaded_one() {
    let nats = NatsCluster::start(3).await;
    let urls = nats.urls().join(",");
    let (s0, s1, s2): (Vec<StubHandle>, Vec<StubHandle>, Vec<StubHandle>) =
        ((0..2).map(|_| provider(false)).collect(), vec![provider(false)], vec![provider(false)]);
    let h0 = start_host(0, &urls, &s0).await;
    let h1 = start_host(1, &urls, &s1).await;
    let _h2 = start_host(2, &urls, &s2).await;
    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let registry = cluster::Hosts::open(&js, 3, Duration::from_secs(3)).await.expect("registry");
    loads_become(&registry, &[("h0", 2), ("h1", 1), ("h2", 1)]).await;
    // An entry in another format is left out; the live hosts are still listed.
    let kv = js.get_key_value(cluster::HOSTS_BUCKET).await.expect("bucket");
    kv.put("bogus", "not a host entry".into()).await.expect("put");

    // A capsule folder only the test (and h0, which is asked) can read.
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let stub = Stub::start(Script::new(vec![Turn::text("placed and answering")])).expect("stub");
    let caps = capsule_folder(elsewhere.path(), 9, std::slice::from_ref(&stub), "");
    let folder = caps.join("c9-0");

    let placed = place(&h0, json!({"path": folder})).await;
    assert_eq!(placed["host"], "h1", "the least loaded, then by name: {placed}");
    assert_eq!(placed["state"], "running", "{placed}");
    let door = placed["url"].as_str().expect("a door").to_string();
    let answer = send_and_wait(&door, "hi").await;
    assert_eq!(answer["result"]["status"]["response"], "placed and answering", "{answer}");
    let on_h1 = api_list(&h1).await;
    assert!(on_h1.iter().any(|e| e["name"] == "c9-0" && e["host"] == "h1" && e["state"] == "running"), "{on_h1:#?}");

    // h1 now runs two, and its entry names the placed capsule's door: the next one goes to h2.
    let live = loads_become(&registry, &[("h0", 2), ("h1", 2), ("h2", 1)]).await;
    assert!(!live.iter().any(|h| h.name == "bogus"), "{live:?}");
    let h1_entry = live.iter().find(|h| h.name == "h1").expect("h1 is live");
    assert!(h1_entry.doors.iter().any(|d| d.url == door && d.capsule == "c9-0"), "{h1_entry:?}");
    let again = place(&h1, json!({"path": folder, "name": "second"})).await;
    assert_eq!((again["host"].as_str(), again["name"].as_str()), (Some("h2"), Some("second")), "{again}");

    // A folder that cannot be kept in the cluster is refused with its code.
    let bad = elsewhere.path().join("bad");
    std::fs::create_dir_all(&bad).expect("folder");
    std::fs::copy(folder.join("murmur.yaml"), bad.join("murmur.yaml")).expect("manifest");
    std::os::unix::fs::symlink("/etc/passwd", bad.join("secrets")).expect("symlink");
    let refused = place(&h0, json!({"path": bad})).await;
    assert!(refused["error"].as_str().is_some_and(|e| e.contains("E-CLU-007") && e.contains("secrets")), "{refused}");
}
