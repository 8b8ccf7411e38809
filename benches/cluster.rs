//! Cluster journal benchmarks for BENCHMARKS.md (issue #13). Run: `cargo bench --bench cluster`
//!
//! Starts a real 3-node nats-server cluster on loopback (the same harness as the tests) and
//! prints, in one run:
//! - one session: sequential fenced appends to its JetStream record (R3), each awaited until
//!   acknowledged — appends/s and the latency of one append (p50, p99);
//! - 100 sessions appending at once, 50 entries each — appends/s across them;
//! - the same sequential appends to a local file with one `write` each, for scale.

#[path = "../tests/e2e/nats.rs"]
#[allow(dead_code, reason = "the bench uses part of the test harness")]
mod nats;

mod common {
    pub fn repo() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }
}

use capsule_actors::cluster::{self, Record, StreamLog};
use std::io::Write;
use std::time::{Duration, Instant};

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
        drop(c);
        tokio::time::sleep(Duration::from_millis(10)).await;
    });
}
