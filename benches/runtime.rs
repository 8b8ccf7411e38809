//! Runtime benchmarks for BENCHMARKS.md. Run: `cargo bench --bench runtime`
//!
//! Prints one table per metric. Everything is measured in one run so ratios are comparable on a
//! noisy machine:
//! - cold start: `capsule run` process spawn → first byte of the first provider request at the
//!   stub, with an empty component cache (cold) and a filled one (warm);
//! - peak RSS of that whole process (VmHWM, printed by the binary when asked);
//! - per-turn runtime overhead: in one session of 101 turns (100 tool-call turns running the
//!   real file tool, then a reply), the gap between two provider requests arriving at the stub
//!   minus the stub's own time answering the first, with the medians over turns 2–20, 41–60 and
//!   81–100 and two flatness ratios (turn 100 / turn 1, and turns 81–100 / turns 2–20), then the
//!   same figures as medians over several such sessions (`CAPSULE_BENCH_SESSIONS`, 5 by default),
//!   on the runtime `capsule run` runs on (one worker; a `capsule host` shard has one worker too,
//!   on a multi-thread runtime, which measured the same in a host), and as
//!   many sessions on a runtime with a worker per core (where `capsule host` ran its capsules
//!   before shards), alternating, in a last table. The stub runs on a runtime
//!   of its own, as a provider is another process; the session's frames are read by a task on
//!   the session's runtime, as `capsule run`'s printer reads them.
//!   Two switches show where turn 1's extra cost lies: `CAPSULE_BENCH_SHARED_HOST=1` runs every
//!   session on one `Host`, and `CAPSULE_BENCH_WARM_TASK=1` gives each session a one-tool-call
//!   task before the one measured;
//! - the same per-turn overhead when the stub takes 20 ms to answer each request, next to the
//!   instant stub's, in alternating sessions (`--think` prints this table alone);
//! - the same per-turn overhead with the session's journal on NATS JetStream (a real 3-node
//!   `nats-server` cluster on loopback, R3, started here) next to the file journal, in one run
//!   (`--cluster` prints this table alone): once from a host connected to the journal stream's
//!   leader, as `capsule host --cluster` connects, and once from a host on a follower.

#[path = "../tests/e2e/nats.rs"]
#[allow(dead_code, reason = "the bench uses part of the test harness")]
mod nats;
#[path = "support/stub_runtime.rs"]
mod stub_runtime;

mod common {
    pub fn repo() -> std::path::PathBuf {
        std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
    }
}

use capsule_actors::cluster::ClusterHost;
use capsule_actors::workers::Workers;
use capsule_actors::{EndpointOverride, LaunchOptions, Session};
use capsule_protocol::frame::Frame;
use capsule_runtime::{Host, HostOptions};
use capsule_stub::{Script, Stub, StubHandle, Turn};
use std::path::PathBuf;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// A stub on the stubs' runtime (`support/stub_runtime.rs`).
fn start_stub(script: Script) -> StubHandle {
    let _guard = stub_runtime::stub_runtime().enter();
    Stub::start(script).expect("stub")
}

/// One `capsule run` process against a fresh stub; returns (ms to first provider byte, peak RSS KiB).
fn one_start(cache: &std::path::Path) -> (f64, u64) {
    let stub = start_stub(Script::new(vec![Turn::text("hi")]));
    let work = tempfile::tempdir().expect("tempdir");
    let t0 = SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_nanos();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["run", "examples/hello", "--task", "hi", "--json", "--endpoint", &stub.url(), "--workdir"])
        .arg(work.path())
        .current_dir(repo())
        .env("CAPSULE_CACHE_DIR", cache)
        .env("ANTHROPIC_API_KEY", "bench-key")
        .env("CAPSULE_PRINT_PEAK_RSS", "1")
        .output()
        .expect("capsule runs");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let first = stub.requests().first().expect("a request").received_unix_ns;
    let stderr = String::from_utf8_lossy(&out.stderr);
    let rss = stderr
        .lines()
        .find_map(|l| l.strip_prefix("peak_rss "))
        .and_then(|v| v.trim_end_matches(" kB").trim().parse().ok())
        .unwrap_or(0);
    ((first - t0) as f64 / 1e6, rss)
}

fn startup() {
    let mut cold = Vec::new();
    let mut cold_rss = Vec::new();
    for _ in 0..3 {
        let cache = tempfile::tempdir().expect("cache");
        let (ms, rss) = one_start(cache.path());
        cold.push(ms);
        cold_rss.push(rss as f64);
    }
    let cache = tempfile::tempdir().expect("cache");
    one_start(cache.path());
    let mut warm = Vec::new();
    let mut warm_rss = Vec::new();
    for _ in 0..15 {
        let (ms, rss) = one_start(cache.path());
        warm.push(ms);
        warm_rss.push(rss as f64);
    }
    println!("\n## Start-up: process spawn → first byte of the first provider request\n");
    println!("| cache | runs | median ms | min ms | max ms | median peak RSS MiB |");
    println!("|---|---|---|---|---|---|");
    for (name, v, r) in
        [("cold (empty)", &mut cold, &mut cold_rss), ("warm (.cwasm on disk)", &mut warm, &mut warm_rss)]
    {
        let (min, max) = (v.iter().cloned().fold(f64::MAX, f64::min), v.iter().cloned().fold(0.0, f64::max));
        println!("| {name} | {} | {:.1} | {:.1} | {:.1} | {:.1} |", v.len(), median(v), min, max, median(r) / 1024.0);
    }
}

/// Turns measured in one session (then a final reply).
const TURNS: usize = 100;
/// The turns whose overhead is printed.
const ROWS: [usize; 5] = [1, 2, 10, 50, 100];

/// What one session measured.
struct Turns {
    /// Per row of [`ROWS`], the median overhead of the 5 turns up to it; key 0, the median over
    /// turns 2–100.
    rows: std::collections::BTreeMap<usize, f64>,
    /// The median overhead over turns 2–20, 41–60 and 81–100.
    windows: [f64; 3],
}

/// The median across sessions of what `f` reads from each.
fn across(runs: &[Turns], f: impl Fn(&Turns) -> f64) -> f64 {
    median(&mut runs.iter().map(f).collect::<Vec<_>>())
}

/// The medians across sessions of the windows' medians (turns 2–20, 41–60, 81–100).
fn windows_across(runs: &[Turns]) -> [f64; 3] {
    [0, 1, 2].map(|i| across(runs, |s| s.windows[i]))
}

/// One session of [`TURNS`] tool-call turns; the per-turn table (when `print`) and what it
/// measured.
fn per_turn(rt: &tokio::runtime::Runtime, cluster: Option<ClusterHost>, print: bool) -> Turns {
    per_turn_thinking(rt, cluster, print, 0)
}

/// [`per_turn`] with the stub taking `think_ms` before each answer, as a provider would.
fn per_turn_thinking(rt: &tokio::runtime::Runtime, cluster: Option<ClusterHost>, print: bool, think_ms: u64) -> Turns {
    // The session's reader is a task on the session's runtime, as `capsule run`'s printer is,
    // not this thread's `block_on`: a reader outside the runtime is one more thread every burst
    // of frames wakes, a cost `capsule run` does not have.
    let session = rt.spawn(async move {
        // `CAPSULE_BENCH_TURNS`: a longer session, for a profile in which the turns outweigh the
        // set-up (the tables still read turns 1–100).
        let n = std::env::var("CAPSULE_BENCH_TURNS").ok().and_then(|v| v.parse().ok()).unwrap_or(TURNS).max(TURNS);
        let think = (think_ms > 0).then_some(think_ms);
        let mut turns: Vec<Turn> = (0..n).map(|i| Turn { text: Some(format!("step {i}")), delay_ms: think, ..Turn::tool_call("files", serde_json::json!({"op": "list", "path": "."})) }).collect();
        turns.push(Turn::text("done"));
        // `CAPSULE_BENCH_WARM_TASK=1`: the session first runs a one-tool-call task of its own,
        // and the turns are those of the task after it: shows which part of turn 1's extra cost
        // is the session's first tool turn rather than the task's.
        let warm = std::env::var_os("CAPSULE_BENCH_WARM_TASK").is_some();
        if warm {
            turns.insert(0, Turn::text("warmed"));
            turns.insert(0, Turn { text: Some("warm".into()), ..Turn::tool_call("files", serde_json::json!({"op": "list", "path": "."})) });
        }
        let stub = start_stub(Script::new(turns));
        let work = tempfile::tempdir().expect("tempdir");
        let cache = repo().join("target/bench-component-cache");
        // `CAPSULE_BENCH_SHARED_HOST=1`: every session on one `Host` (one engine, pool and
        // component cache, as `capsule host` runs its capsules) instead of one each (as each
        // `capsule run` has): shows which part of turn 1's extra cost is the new host's.
        let host = if std::env::var_os("CAPSULE_BENCH_SHARED_HOST").is_some() {
            static SHARED: std::sync::OnceLock<Host> = std::sync::OnceLock::new();
            SHARED.get_or_init(|| Host::new(HostOptions { cache_dir: Some(cache) }).expect("host")).clone()
        } else {
            Host::new(HostOptions { cache_dir: Some(cache) }).expect("host")
        };
        let dir = tempfile::tempdir().expect("capsule dir");
        let manifest = std::fs::read_to_string(repo().join("examples/hello/murmur.yaml")).expect("manifest").replace("../../components", &repo().join("components").display().to_string()).replace("max_turns: 6", &format!("max_turns: {}", n + 10));
        std::fs::write(dir.path().join("murmur.yaml"), manifest).expect("write");
        let opts = LaunchOptions {
            cluster,
            manifest: dir.path().into(),
            workdir: work.path().into(),
            host,
            env: [("ANTHROPIC_API_KEY".to_string(), "bench".to_string())].into(),
            endpoint_override: Some(EndpointOverride { endpoint: stub.url(), keyless: false }),
            machine: None,
            host_config: None,
        };
        let session = Session::launch(opts).await.expect("launch");
        let mut rx = session.subscribe(None).await.expect("subscribe");
        if warm {
            let warmed = session.submit("warm").await.expect("warm task");
            assert_eq!(warmed.exit_status, capsule_protocol::trace::ExitStatus::Ok);
            loop {
                let f = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.expect("frames").expect("open");
                if let Frame::Status { is_final: true, .. } = &f.frame {
                    break;
                }
            }
        }
        let submit = tokio::spawn({
            let s = std::sync::Arc::new(session);
            let s2 = s.clone();
            async move { (s2.submit("go").await, s) }
        });
        loop {
            let f = tokio::time::timeout(Duration::from_secs(60), rx.recv()).await.expect("frames").expect("open");
            if let Frame::Status { is_final: true, .. } = &f.frame {
                break;
            }
        }
        let (outcome, session) = submit.await.expect("join");
        assert_eq!(outcome.expect("outcome").exit_status, capsule_protocol::trace::ExitStatus::Ok);
        session.shutdown().await;
        let mut reqs = stub.requests();
        if warm {
            reqs.drain(..2);
        }
        assert_eq!(reqs.len(), n + 1, "one provider request per turn");
        // Turn t runs from the arrival of provider request t − 1 at the stub to the arrival of
        // request t: the stub's answer, the runtime's work on it (journal, the tool, the next
        // request). Timed at the stub, so how frames reach a watcher does not enter it.
        let wall = |t: usize| (reqs[t].received_unix_ns - reqs[t - 1].received_unix_ns) as f64 / 1e6;
        let overhead = |t: usize| wall(t) - reqs[t - 1].stub_elapsed_ns as f64 / 1e6;
        let median_to = |t: usize| {
            let mut window: Vec<f64> = if t == 1 { vec![overhead(1)] } else { (t.saturating_sub(4).max(2)..=t).map(overhead).collect() };
            median(&mut window)
        };
        let mut row: std::collections::BTreeMap<usize, f64> = ROWS.iter().map(|&t| (t, median_to(t))).collect();
        // Key 0: the median over turns 2–100, the steadiest single figure of a session.
        row.insert(0, median(&mut (2..=TURNS).map(overhead).collect::<Vec<_>>()));
        let window = |a: usize, b: usize| median(&mut (a..=b).map(overhead).collect::<Vec<_>>());
        let windows = [window(2, 20), window(41, 60), window(81, 100)];
        if !print {
            return Turns { rows: row, windows };
        }
        let trace: Vec<serde_json::Value> = std::fs::read_to_string(session.dir.join("trace.jsonl")).expect("trace").lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
        let calls: Vec<(f64, u64)> = trace.iter().filter(|e| e["event_type"] == "inference").map(|e| (e["call_ms"].as_f64().unwrap_or(0.0), e["instantiate_us"].as_u64().unwrap_or(0))).collect();
        let tools: Vec<u64> = trace.iter().filter(|e| e["event_type"] == "tool_call").map(|e| e["duration_ms"].as_u64().unwrap_or(0)).collect();
        println!("\n## Per-turn runtime overhead (turn wall time − stub time), one session of {} turns\n", n + 1);
        println!("Each turn: driver instantiate + neutral→Anthropic translation + loopback HTTP + SSE parse in the component + one real file-tool call + loop bookkeeping.\n");
        println!("| turn | wall ms | stub ms | overhead ms | median overhead, 5 turns to here | of which: gateway call ms (instantiate µs) | tool ms (the trace's whole ms) | request body KiB |");
        println!("|---|---|---|---|---|---|---|---|");
        // A turn's overhead: its wall time minus the stub's; the median over the 5 turns ending at
        // the named one (a single turn is at the mercy of this noisy machine).
        for t in ROWS {
            let wall = wall(t);
            let stub_ms = reqs[t - 1].stub_elapsed_ns as f64 / 1e6;
            let (call_ms, inst) = calls.get(t - 1).copied().unwrap_or_default();
            let body_kib = reqs[t - 1].body.to_string().len() as f64 / 1024.0;
            let med = row[&t];
            println!("| {t} | {wall:.3} | {stub_ms:.3} | {:.3} | {med:.3} | {call_ms:.3} ({inst}) | {} | {body_kib:.1} |", wall - stub_ms, tools.get(t - 1).copied().unwrap_or(0));
        }
        let [early, middle, late] = windows;
        println!("\nMedian overhead over turns 2–20 / 41–60 / 81–100: {early:.3} / {middle:.3} / {late:.3} ms");
        println!("\nFlatness by windows: turns 81–100 / turns 2–20 = {:.2}", late / early);
        println!("\nFlatness: turn 100 / turn 1 = {:.2}; around turn 100 / around turn 2 = {:.2} (turn 1 also pays first-use costs)", row[&100] / row[&1], row[&100] / row[&2]);
        Turns { rows: row, windows }
    });
    rt.block_on(session).expect("the session's task")
}

/// More sessions like the printed one (`CAPSULE_BENCH_SESSIONS` in all, 5 unless set): one
/// session's ratios are at the mercy of a noisy machine, the median of several much less. As
/// many on the host's runtime, alternating, compared in a last table.
fn per_turn_sessions([rt, host_rt]: [&tokio::runtime::Runtime; 2], first: Turns) {
    let n = std::env::var("CAPSULE_BENCH_SESSIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(5usize).max(1);
    let (mut all, mut on_host) = (vec![first], Vec::new());
    for i in 0..n {
        on_host.push(per_turn(host_rt, None, false));
        if i + 1 < n {
            all.push(per_turn(rt, None, false));
        }
    }
    println!("\n### The same over {n} sessions (medians across sessions)\n");
    println!("| turn | median overhead, 5 turns to here, ms |");
    println!("|---|---|");
    for t in ROWS {
        println!("| {t} | {:.3} |", across(&all, |s| s.rows[&t]));
    }
    let [early, middle, late] = windows_across(&all);
    println!("\nMedian overhead over turns 2–20 / 41–60 / 81–100: {early:.3} / {middle:.3} / {late:.3} ms");
    println!(
        "\nFlatness by windows: turns 81–100 / turns 2–20 = {:.2}; turn 100 / turn 1 = {:.2}",
        late / early,
        across(&all, |s| s.rows[&100]) / across(&all, |s| s.rows[&1])
    );
    println!("\n### By runtime ({n} sessions each, alternating; medians across sessions)\n");
    println!("| runtime | turn 1 ms | turn 50 ms | turns 2–20 ms | turns 41–60 ms | turns 81–100 ms |");
    println!("|---|---|---|---|---|---|");
    for (name, runs) in
        [("one worker (`capsule run`, a host's shard)", &all), ("a worker per core (a host before shards)", &on_host)]
    {
        let [early, middle, late] = windows_across(runs);
        println!(
            "| {name} | {:.3} | {:.3} | {early:.3} | {middle:.3} | {late:.3} |",
            across(runs, |s| s.rows[&1]),
            across(runs, |s| s.rows[&50])
        );
    }
}

/// Provider time per answer in [`think_time`]'s slow sessions.
const THINK_MS: u64 = 20;

/// The per-turn overhead when the provider takes [`THINK_MS`] to answer, as a real one takes
/// seconds, next to the instant stub's, in sessions that alternate (`CAPSULE_BENCH_SESSIONS`
/// pairs, 3 unless set). Back to back, a turn's code and data are still in the CPU's caches and
/// its threads still awake from the turn before; after a pause they are not, and the same work
/// takes longer.
fn think_time(rt: &tokio::runtime::Runtime) {
    let n = std::env::var("CAPSULE_BENCH_SESSIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(3usize).max(1);
    let mut runs: [Vec<Turns>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..n {
        for (i, think) in [0, THINK_MS].into_iter().enumerate() {
            runs[i].push(per_turn_thinking(rt, None, false, think));
        }
    }
    println!(
        "\n## Per-turn overhead when the provider takes time to answer ({n} sessions each, alternating; medians across sessions)\n"
    );
    println!("| provider time per answer | turn 1 ms | turns 2–20 ms | turns 41–60 ms | turns 81–100 ms |");
    println!("|---|---|---|---|---|");
    for (think, all) in [0, THINK_MS].into_iter().zip(&runs) {
        let [early, middle, late] = windows_across(all);
        println!("| {think} ms | {:.3} | {early:.3} | {middle:.3} | {late:.3} |", across(all, |s| s.rows[&1]));
    }
}

/// The per-turn overhead with the journal on JetStream (R3) next to the file journal, sessions
/// alternating so that both see the same machine. As in `capsule host --cluster`, the cluster's
/// connections are made on the host's runtime (`host_rt`, a worker per core) and the sessions
/// run on a shard's (`rt`, one worker).
fn cluster_per_turn(rt: &tokio::runtime::Runtime, host_rt: &tokio::runtime::Runtime) {
    let nats = host_rt.block_on(nats::NatsCluster::start(3));
    // A host as `capsule host --cluster` makes it (on the journal stream's leader), and one on
    // a follower, to show what the leader's connection saves.
    let (host, follower) = host_rt.block_on(async {
        let urls = nats.urls();
        let host = ClusterHost::start(&urls, "bench", 3, Duration::from_secs(3)).await.expect("joins");
        let leader = host
            .js
            .get_stream(capsule_actors::cluster::JOURNAL_STREAM)
            .await
            .expect("journal stream")
            .info()
            .await
            .expect("stream info")
            .cluster
            .clone()
            .and_then(|c| c.leader);
        let mut follower = None;
        for url in &urls {
            let client = capsule_actors::cluster::connect(std::slice::from_ref(url)).await.expect("connects");
            if Some(client.server_info().server_name) != leader {
                follower = Some(client);
                break;
            }
        }
        let follower = follower.expect("a server that does not lead the journal stream");
        let follower =
            ClusterHost::join(async_nats::jetstream::new(follower), "bench-follower", 3, Duration::from_secs(3))
                .await
                .expect("joins");
        (host, follower)
    });
    let (mut files, mut js, mut far): (Vec<_>, Vec<_>, Vec<_>) = (Vec::new(), Vec::new(), Vec::new());
    let stored = || {
        host_rt.block_on(async {
            let mut stream = host.js.get_stream(capsule_actors::cluster::JOURNAL_STREAM).await.expect("journal stream");
            stream.info().await.expect("stream info").state.messages
        })
    };
    let before = stored();
    let (mut cpu_files, mut cpu_js) = (0.0, 0.0);
    for _ in 0..3 {
        let c0 = cpu_ms(&nats.pids());
        files.push(per_turn(rt, None, false));
        let c1 = cpu_ms(&nats.pids());
        js.push(per_turn(rt, Some(host.clone()), false));
        cpu_js += cpu_ms(&nats.pids()) - c1;
        cpu_files += c1 - c0;
        far.push(per_turn(rt, Some(follower.clone()), false));
    }
    let per_turn_entries = (stored() - before) as f64 / (6 * (TURNS + 1)) as f64;
    println!("\n## Per-turn overhead: JetStream journal (3 nats-servers, R3, loopback) vs files\n");
    println!(
        "3 sessions each (files, JetStream from the leader's connection, JetStream from a follower's), alternating; per session the median of the 5 turns up to the row; the table shows the median of the 3 sessions.\n"
    );
    println!("| turn | files ms | JetStream ms | difference ms | JetStream via a follower ms | difference ms |");
    println!("|---|---|---|---|---|---|");
    for t in ROWS.into_iter().chain([0]) {
        let mut f: Vec<f64> = files.iter().map(|r| r.rows[&t]).collect();
        let mut j: Vec<f64> = js.iter().map(|r| r.rows[&t]).collect();
        let mut v: Vec<f64> = far.iter().map(|r| r.rows[&t]).collect();
        let (f, j, v) = (median(&mut f), median(&mut j), median(&mut v));
        let label = if t == 0 { format!("all of 2–{TURNS}") } else { t.to_string() };
        println!("| {label} | {f:.3} | {j:.3} | {:+.3} | {v:.3} | {:+.3} |", j - f, v - f);
    }
    println!(
        "\nJetStream entries stored per turn (conversation, trace and frames, each an acknowledged append): {per_turn_entries:.1}"
    );
    let turns = (3 * (TURNS + 1)) as f64;
    println!(
        "\nCPU of the three nats-servers per turn: {:.3} ms in a JetStream session (leader's connection), {:.3} ms in a file session (their idle cost)",
        cpu_js / turns,
        cpu_files / turns
    );
    drop(nats);
}

/// CPU time (user + system) the processes have used so far, ms.
fn cpu_ms(pids: &[u32]) -> f64 {
    let tick = 100.0; // USER_HZ on Linux
    pids.iter()
        .filter_map(|p| std::fs::read_to_string(format!("/proc/{p}/stat")).ok())
        .filter_map(|stat| {
            // Fields after the command (which may hold spaces) in parentheses.
            let rest = stat.rsplit_once(')')?.1;
            let f: Vec<&str> = rest.split_whitespace().collect();
            Some((f.get(11)?.parse::<f64>().ok()? + f.get(12)?.parse::<f64>().ok()?) * 1000.0 / tick)
        })
        .sum()
}

fn main() {
    // The sessions run on the runtime `capsule run` runs on (one worker, the current-thread
    // runtime; a host's shard is one worker too), the JetStream sessions (a clustered host's)
    // included; the per-turn
    // sessions also on a worker per core (where `capsule host` ran them before shards),
    // alternating.
    let runtime = |workers| {
        let rt = capsule_actors::workers::runtime(workers).expect("runtime");
        // As the `capsule` binary does: `CAPSULE_BENCH_NO_TIMER_FLOOR=1` leaves it out, to compare.
        if std::env::var_os("CAPSULE_BENCH_NO_TIMER_FLOOR").is_none() {
            let _entered = rt.enter();
            capsule_actors::timer_floor::spawn_timer_floor();
        }
        rt
    };
    let (rt, host_rt) = (runtime(Workers::One), runtime(Workers::PerCore));
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!(
        "# capsule-runtime benchmarks ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    // `--startup`: only the start-up table; `--turns`: only the per-turn table (for profiling
    // it alone); `--think`: only the per-turn overhead with and without provider time;
    // `--cluster`: only the JetStream comparison.
    let only = |flag: &str| std::env::args().any(|a| a == flag);
    if only("--cluster") {
        return cluster_per_turn(&rt, &host_rt);
    }
    if only("--think") {
        return think_time(&rt);
    }
    if !only("--turns") {
        startup();
    }
    if only("--startup") {
        return;
    }
    let first = per_turn(&rt, None, true);
    per_turn_sessions([&rt, &host_rt], first);
    if !only("--turns") {
        think_time(&rt);
        cluster_per_turn(&rt, &host_rt);
    }
}
