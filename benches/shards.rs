//! Busy capsules in one host, for BENCHMARKS.md. Run: `cargo bench --bench shards`
//!
//! K capsules (1, 2, 4 and 8; `CAPSULE_BENCH_CAPSULES=1,2` to choose) in one host, through
//! `capsule_actors::host` (the code behind `capsule host`), each given a task of
//! [`TURNS`] tool-call turns (the real file tool lists its folder) and a reply at the same
//! moment, against a stub of its own. The stubs share one runtime of one worker, as a provider
//! is another process. The host's actors run on a runtime with a worker per core, as `capsule
//! host`'s do; the capsules' sessions run either on that runtime too (how `capsule host` ran
//! them before shards) or each on a shard (`capsule_actors::shards`, how it runs them now).
//! The two take turns, `CAPSULE_BENCH_ROUNDS` rounds (5 unless set).
//!
//! Per K and way: the wall time from the tasks' start to the last one's end, the turns per
//! second that makes, the median and 90th percentile of every capsule's per-turn overhead (the
//! gap between two of its provider requests at its stub minus the stub's time, turns 2 to the
//! last), and the process's CPU time per turn (the process's CPU clock, the stubs' included).

#[path = "support/stub_runtime.rs"]
mod stub_runtime;
#[path = "support/shared.rs"]
mod support;

use capsule_actors::host::{CapsuleState, HostHandle, RestartPolicy};
use capsule_actors::workers::{Workers, runtime};
use capsule_protocol::host_file::PlannedCapsule;
use capsule_runtime::{Host, HostOptions};
use capsule_stub::{Script, Stub, StubHandle, Turn};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Tool-call turns per task.
const TURNS: usize = 50;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A stub on the stubs' runtime (`support/stub_runtime.rs`), none of the host's.
fn start_stub(script: Script) -> StubHandle {
    let _guard = stub_runtime::stub_runtime().enter();
    Stub::start(script).expect("stub")
}

/// A keyless capsule with the file tool, pointed at `endpoint`.
fn write_capsule(dir: &Path, endpoint: &str) -> PathBuf {
    std::fs::create_dir_all(dir).expect("folder");
    let dist = repo().join("components/dist");
    let yaml = format!(
        "name: busy\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: {dist}/driver-anthropic.wasm\n    gateway: {{endpoint: '{endpoint}', keyless: true}}\n  - name: files\n    runtime: tool\n    source: {}\ncapabilities:\n  filesystem:\n    scope: .\ninference: {{model: claude-test, max_turns: {}, driver: {{artifact: anthropic}}}}\n",
        repo().join("components/artifacts/files").display(),
        TURNS + 10,
        dist = dist.display(),
    );
    std::fs::write(dir.join("murmur.yaml"), yaml).expect("manifest");
    dir.to_path_buf()
}

/// CPU time of this process so far, ms.
fn cpu_ms() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 * 1e3 + t.tv_nsec as f64 / 1e6
}

/// What one run measured.
struct Busy {
    wall_ms: f64,
    overheads: Vec<f64>,
    cpu_ms: f64,
}

/// K capsules in one host, each given its task at once; `shards`: on shards or not.
async fn busy(host: &Host, k: usize, shards: bool) -> Busy {
    let work = tempfile::tempdir().expect("tempdir");
    let stubs: Vec<StubHandle> = (0..k)
        .map(|_| {
            let mut turns: Vec<Turn> = (0..TURNS)
                .map(|i| Turn {
                    text: Some(format!("step {i}")),
                    ..Turn::tool_call("files", serde_json::json!({"op": "list", "path": "."}))
                })
                .collect();
            turns.push(Turn::text("done"));
            start_stub(Script::new(turns))
        })
        .collect();
    let planned: Vec<PlannedCapsule> = stubs
        .iter()
        .enumerate()
        .map(|(i, stub)| PlannedCapsule {
            name: format!("busy-{i}"),
            manifest: write_capsule(&work.path().join(format!("capsule-{i}")), &stub.url()),
            workdir: work.path().join(format!("work-{i}")),
            port: 0,
        })
        .collect();
    let h = HostHandle::start(planned, support::loopback(host, shards), RestartPolicy::default()).await.expect("host");
    let settled = h.settled().await.expect("settled");
    assert!(settled.iter().all(|e| e.state == CapsuleState::Running), "{settled:?}");
    let mut sessions = Vec::new();
    for i in 0..k {
        sessions.push(h.session(&format!("busy-{i}")).await.expect("host").expect("running"));
    }
    let (t0, cpu0) = (Instant::now(), cpu_ms());
    let tasks: Vec<_> = sessions
        .iter()
        .map(|s| {
            tokio::spawn({
                let s = s.clone();
                async move { s.submit("go").await }
            })
        })
        .collect();
    for t in tasks {
        let outcome = t.await.expect("join").expect("task");
        assert_eq!(outcome.message, "done");
    }
    let (wall_ms, cpu_ms) = (t0.elapsed().as_secs_f64() * 1e3, cpu_ms() - cpu0);
    drop(sessions);
    h.shutdown().await.expect("shutdown");
    let mut overheads = Vec::new();
    for stub in &stubs {
        let r = stub.requests();
        assert_eq!(r.len(), TURNS + 1, "one request per turn");
        for t in 2..=TURNS {
            let gap = (r[t].received_unix_ns - r[t - 1].received_unix_ns) as f64 / 1e6;
            overheads.push(gap - r[t - 1].stub_elapsed_ns as f64 / 1e6);
        }
    }
    Busy { wall_ms, overheads, cpu_ms }
}

fn rank(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    s[(((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize) - 1]
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let counts: Vec<usize> = std::env::var("CAPSULE_BENCH_CAPSULES")
        .ok()
        .map(|v| v.split(',').filter_map(|n| n.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![1, 2, 4, 8]);
    let rounds = std::env::var("CAPSULE_BENCH_ROUNDS").ok().and_then(|v| v.parse().ok()).unwrap_or(5usize).max(1);
    // The host's own runtime: a worker per core, as `capsule host` builds it.
    let rt = runtime(Workers::PerCore).expect("runtime");
    {
        let _entered = rt.enter();
        capsule_actors::timer_floor::spawn_timer_floor();
    }
    let host = Host::new(HostOptions { cache_dir: Some(repo().join("target/bench-component-cache")) }).expect("host");
    let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    println!(
        "# Busy capsules in one host ({cores} cores; {TURNS} tool-call turns each, {rounds} rounds, alternating)\n"
    );
    println!(
        "| capsules | where the sessions run | wall ms | turns/s | overhead per turn, median / p90 ms | CPU per turn ms | shards faster in |"
    );
    println!("|---|---|---|---|---|---|---|");
    // One warm-up run, so the components are in memory and the first row pays no first use.
    rt.block_on(busy(&host, 1, true));
    for &k in &counts {
        let mut runs: [Vec<Busy>; 2] = [Vec::new(), Vec::new()];
        for round in 0..rounds {
            let order = if round % 2 == 0 { [false, true] } else { [true, false] };
            for shards in order {
                runs[shards as usize].push(rt.block_on(busy(&host, k, shards)));
            }
        }
        let faster = runs[0].iter().zip(&runs[1]).filter(|(a, b)| b.wall_ms < a.wall_ms).count();
        for (i, way) in ["a worker per core, shared (before)", "a shard each (`capsule host` now)"].iter().enumerate() {
            let r = &runs[i];
            let median = |f: &dyn Fn(&Busy) -> f64| rank(&r.iter().map(f).collect::<Vec<_>>(), 50.0);
            let wall = median(&|b| b.wall_ms);
            let all: Vec<f64> = r.iter().flat_map(|b| b.overheads.iter().copied()).collect();
            let cpu = median(&|b| b.cpu_ms / (k * (TURNS + 1)) as f64);
            let turns_per_s = (k * (TURNS + 1)) as f64 / (wall / 1e3);
            let note = if i == 1 { format!("{faster} of {rounds} (wall)") } else { String::new() };
            println!(
                "| {k} | {way} | {wall:.1} | {turns_per_s:.0} | {:.3} / {:.3} | {cpu:.3} | {note} |",
                rank(&all, 50.0),
                rank(&all, 90.0)
            );
        }
    }
}
