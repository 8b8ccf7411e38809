//! Failover time for BENCHMARKS.md (issue #13). Run: `cargo bench --bench failover`
//!
//! A real 3-node nats-server cluster and a surviving `capsule host --cluster` process (the
//! release binary). Ten times: a new host starts with one capsule, is given a multi-step task,
//! and is killed (SIGKILL) once the task's first tool call has landed. The figure is the time
//! from the kill to the first entry the survivor journals for that session (its resumed
//! `session_start`, written once it holds the lease), by the wall clock of this machine. The
//! lease TTL is the default 3 s; the target is TTL + 1 s.

#[path = "../tests/e2e/nats.rs"]
#[allow(dead_code, reason = "the bench uses part of the test harness")]
mod nats;

#[path = "../tests/e2e/cluster_support.rs"]
#[allow(dead_code, reason = "the bench uses part of the test support")]
mod cluster_support;

#[path = "../tests/e2e/http_support.rs"]
mod http_support;

#[path = "../tests/e2e/common.rs"]
mod common;

use capsule_actors::cluster;
use cluster_support::*;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

const KILLS: usize = 10;

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let nats = nats::NatsCluster::start(3).await;
        let urls = nats.urls().join(",");
        let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
        let survivor_stubs = vec![provider(false)];
        let _survivor = start_host(1, &urls, &survivor_stubs).await;
        let mut times = Vec::new();
        for k in 0..KILLS {
            let stubs = vec![provider(false)];
            let mut victim = start_host(10 + k, &urls, &stubs).await;
            let (name, (session, door)) =
                victim.capsules.iter().next().map(|(n, s)| (n.clone(), s.clone())).expect("one");
            submit(&door).await;
            let root = victim.root.path().to_path_buf();
            while effects(&[&root], &name).is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            victim.child.start_kill().expect("kill -9");
            let killed = now_ms();
            let _ = victim.child.wait().await;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
            let claimed = loop {
                let t = trace(&js, &session).await;
                if let Some(e) = t.iter().find(|e| e["event_type"] == "session_start" && e["resumed"] == true) {
                    break e["timestamp"].as_u64().expect("timestamp");
                }
                assert!(tokio::time::Instant::now() < deadline, "not claimed within 30 s");
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            let ms = claimed.saturating_sub(killed);
            eprintln!("kill {}: {ms} ms", k + 1);
            times.push(ms);
        }
        times.sort_unstable();
        let median = (times[KILLS / 2 - 1] + times[KILLS / 2]) / 2;
        println!("| metric | value |");
        println!("|---|---|");
        println!("| failover: kill -9 → first entry journaled by the new owner, median of {KILLS} | {median} ms |");
        println!("| failover: max of {KILLS} | {} ms |", times[KILLS - 1]);
        println!("| lease TTL (target: TTL + 1 s = 4000 ms) | 3000 ms |");
    });
}
