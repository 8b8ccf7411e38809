//! Cluster journal benchmarks for BENCHMARKS.md (issue #13). Run: `cargo bench --bench cluster`
//!
//! Starts a real 3-node nats-server cluster on loopback (the same harness as the tests) and
//! prints, in one run:
//! - one session: sequential fenced appends to its JetStream record (R3), each awaited until
//!   acknowledged — appends/s and the latency of one append (p50, p99);
//! - 100 sessions appending at once, 50 entries each — appends/s across them;
//! - the same sequential appends to a local file with one `write` each, for scale;
//! - memory per idle clustered session: three `capsule host --cluster` processes (the release
//!   binary), then 1,000 placements of one small capsule through `POST /capsules` (asked of
//!   each host in turn; each placement goes to the least loaded host). VmRSS of the three hosts
//!   and of the three nats-servers before the placements and after 2 s idle; the deltas over
//!   1,000. `--idle` runs this part alone.
//! - `--via` alone: the sequential appends through each server in turn (three rounds), so the
//!   journal stream's leader can be told from its followers by what an append costs.

#[path = "../tests/e2e/nats.rs"]
#[allow(dead_code, reason = "the bench uses part of the test harness")]
mod nats;

#[path = "../tests/e2e/cluster_support.rs"]
#[allow(dead_code, reason = "the bench uses part of the test support")]
mod cluster_support;

#[path = "../tests/e2e/http_support.rs"]
mod http_support;

#[path = "support/limits.rs"]
mod limits;

#[path = "../tests/e2e/common.rs"]
mod common;

/// Idle sessions placed in the memory run.
const IDLE: usize = 1000;

/// VmRSS of a process, KiB.
fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

/// Memory per idle clustered session, on the hosts and in NATS (see the module docs).
async fn idle_sessions(c: &nats::NatsCluster) {
    use cluster_support::{api_list, api_post, capsule_folder, start_host};
    let limit = limits::ensure_nofile(4 * IDLE as u64);
    let urls = c.urls().join(",");
    let stubs: Vec<_> = (0..3)
        .map(|_| {
            capsule_stub::Stub::start(capsule_stub::Script::new(vec![capsule_stub::Turn::text("hi")])).expect("stub")
        })
        .collect();
    let mut hosts = Vec::new();
    for (i, stub) in stubs.iter().enumerate() {
        hosts.push(start_host(i, &urls, std::slice::from_ref(stub)).await);
    }
    let elsewhere = tempfile::tempdir().expect("tempdir");
    let folder = capsule_folder(elsewhere.path(), 9, &stubs[..1], "").join("c9-0");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let host_pids: Vec<u32> = hosts.iter().map(|h| h.child.id().expect("host pid")).collect();
    let total = |pids: &[u32]| pids.iter().map(|&p| rss_kib(p)).sum::<u64>();
    let (hosts_before, nats_before) = (total(&host_pids), total(&c.pids()));
    let t0 = Instant::now();
    for k in 0..IDLE {
        let body = serde_json::json!({"path": folder, "name": format!("idle-{k}")});
        let (status, answer) = api_post(&hosts[k % hosts.len()], "/capsules", &body).await;
        assert!(status < 300, "placement {k}: {status} {answer}");
    }
    let placing = t0.elapsed();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (hosts_after, nats_after) = (total(&host_pids), total(&c.pids()));
    // Any host lists the whole cluster; each entry names its owner.
    let mut per_host = std::collections::BTreeMap::<String, usize>::new();
    for e in api_list(&hosts[0]).await.iter().filter(|e| e["name"].as_str().is_some_and(|n| n.starts_with("idle-"))) {
        *per_host.entry(e["host"].as_str().unwrap_or("?").to_string()).or_default() += 1;
    }
    let mib = |kib: u64| kib as f64 / 1024.0;
    let per = |before: u64, after: u64| after.saturating_sub(before) as f64 / IDLE as f64 / 1024.0;
    println!("\n## {IDLE} idle clustered sessions on 3 hosts (3 nats-servers, R3)\n");
    println!(
        "{limit}; placements {:.1} s ({:.0}/s); sessions per host as listed: {per_host:?}\n",
        placing.as_secs_f64(),
        IDLE as f64 / placing.as_secs_f64()
    );
    println!("| processes | VmRSS before, MiB | after 2 s idle, MiB | per session, MiB |");
    println!("|---|---|---|---|");
    println!(
        "| 3 capsule hosts | {:.1} | {:.1} | {:.3} |",
        mib(hosts_before),
        mib(hosts_after),
        per(hosts_before, hosts_after)
    );
    println!(
        "| 3 nats-servers | {:.1} | {:.1} | {:.3} |",
        mib(nats_before),
        mib(nats_after),
        per(nats_before, nats_after)
    );
}

use capsule_actors::cluster::{self, Record, StreamLog};
use std::io::Write;
use std::time::{Duration, Instant};

async fn via_each(c: &nats::NatsCluster) {
    let client = cluster::connect(&c.urls()).await.expect("connects");
    let js = async_nats::jetstream::new(client);
    let mut stream = cluster::ensure_journal(&js, 3).await.expect("stream");
    let leader = stream.info().await.expect("info").cluster.clone().and_then(|c| c.leader);
    println!("leader {leader:?}");
    for round in 0..3 {
        for (i, url) in c.urls().iter().enumerate() {
            let client = cluster::connect(std::slice::from_ref(url)).await.expect("connects");
            let name = client.server_info().server_name.clone();
            let js = async_nats::jetstream::new(client);
            let (mut log, _) =
                StreamLog::open(&js, &format!("ses_via_{round}_{i}"), Record::Trace).await.expect("open");
            let mut lat = Vec::new();
            for n in 0..1000 {
                let t = Instant::now();
                log.append(line(n)).await.expect("append");
                lat.push(t.elapsed().as_secs_f64() * 1e6);
            }
            let (p50, p99) = (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99));
            println!("round {round} via {name}: p50 {p50:.0} µs p99 {p99:.0} µs");
        }
    }
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn line(n: usize) -> Vec<u8> {
    format!(r#"{{"event_type":"tool_call","n":{n},"content":"{}"}}"#, "x".repeat(200)).into_bytes()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("runtime");
    rt.block_on(async {
        let c = nats::NatsCluster::start(3).await;
        if std::env::args().any(|a| a == "--idle") {
            return idle_sessions(&c).await;
        }
        if std::env::args().any(|a| a == "--via") {
            return via_each(&c).await;
        }
        let client = cluster::connect(&c.urls()).await.expect("connects");
        let js = async_nats::jetstream::new(client);
        cluster::ensure_journal(&js, 3).await.expect("stream");

        const N: usize = 2000;
        let (mut log, _) = StreamLog::open(&js, "ses_bench_one", Record::Trace).await.expect("open");
        let mut lat = Vec::with_capacity(N);
        let t0 = Instant::now();
        for n in 0..N {
            let t = Instant::now();
            log.append(line(n)).await.expect("append");
            lat.push(t.elapsed().as_secs_f64() * 1e6);
        }
        let one = N as f64 / t0.elapsed().as_secs_f64();
        let (p50, p99) = (percentile(&mut lat, 0.5), percentile(&mut lat, 0.99));

        const SESSIONS: usize = 100;
        const EACH: usize = 50;
        let t0 = Instant::now();
        let mut tasks = Vec::new();
        for s in 0..SESSIONS {
            let js = js.clone();
            tasks.push(tokio::spawn(async move {
                let (mut log, _) = StreamLog::open(&js, &format!("ses_bench_{s}"), Record::Trace).await.expect("open");
                for n in 0..EACH {
                    log.append(line(n)).await.expect("append");
                }
            }));
        }
        for t in tasks {
            t.await.expect("session");
        }
        let many = (SESSIONS * EACH) as f64 / t0.elapsed().as_secs_f64();

        let dir = tempfile::tempdir().expect("tempdir");
        let mut f = std::fs::File::create(dir.path().join("trace.jsonl")).expect("file");
        let t0 = Instant::now();
        for n in 0..N {
            let mut l = line(n);
            l.push(b'\n');
            f.write_all(&l).expect("write");
        }
        let file = N as f64 / t0.elapsed().as_secs_f64();

        println!("| journal append (one awaited write each) | appends/s | p50 µs | p99 µs |");
        println!("|---|---|---|---|");
        println!("| JetStream R3, one session, sequential | {one:.0} | {p50:.0} | {p99:.0} |");
        println!("| JetStream R3, 100 sessions at once (50 each) | {many:.0} | — | — |");
        println!("| local file, one `write` each | {file:.0} | — | — |");
        idle_sessions(&c).await;
        drop(c);
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
}
