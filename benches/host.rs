//! Multi-capsule host benchmarks for BENCHMARKS.md. Run: `cargo bench --bench host`
//!
//! Everything runs in this one process, through `capsule_actors::host` (the code behind
//! `capsule host`), against the in-process provider stub, keyless.
//!
//! - **Restart-to-serving after an injected gateway crash.** A capsule under a host; per
//!   sample, a fresh session (host restart) gets one `Session::inject_gateway_panic`; the bench
//!   spins until a *new* gateway actor is registered under the session's gateway name (the
//!   restart), then submits a task and waits for its outcome. Reported: inject → new gateway
//!   registered, and inject → task completed minus the stub's own time for that request
//!   (`stub_elapsed_ns`). A task with no crash is measured the same way as the baseline. The
//!   session supervisor restarts the first failure in its 10 s window at once and backs off
//!   (10 ms doubling) for later ones; a few sessions are crashed four more times to show those.
//! - **Host restart after a crash loop** (capsule-level, with the restart backoff set to 0 so the
//!   machinery is measured, not the wait): the session's supervisor stops on a crash loop → the
//!   host's entry shows a new running session → its new door answers `GET
//!   /.well-known/agent-card.json`. Also an operator restart (`POST …/restart`: graceful stop,
//!   launch, door) end to end.
//! - **Density and start time.** VmRSS of this process (`/proc/self/status`) after a one-capsule
//!   warm-up host (engine, component in memory, encoder) and after starting 1,000 idle capsules
//!   (one small capsule folder, one workdir each, every door on its own loopback port); marginal
//!   RSS per capsule = delta / 1,000. Start time = `HostHandle::start` → every capsule `running`.
//!   Each capsule holds a door listener and two open journal files, so the bench raises the soft
//!   RLIMIT_NOFILE to the hard limit (with `prlimit`) when it is below what 1,000 need.

#[path = "support/limits.rs"]
mod limits;
#[path = "support/shared.rs"]
mod support;
use limits::ensure_nofile;

use capsule_actors::GatewayMsg;
use capsule_actors::host::{Action, CapsuleState, HostHandle, RestartPolicy, Shared};
use capsule_actors::names;
use capsule_protocol::host_file::PlannedCapsule;
use capsule_protocol::trace::ExitStatus;
use capsule_runtime::{Host, HostOptions};
use capsule_stub::{Script, Stub, StubHandle, Turn};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Idle capsules in the density run.
const CAPSULES: usize = 1000;
/// Fresh sessions in the gateway-restart run, each crashed once (the first failure in the
/// session supervisor's window is restarted at once; later ones back off by design).
const SAMPLES: usize = 50;
/// Of those, how many sessions are then crashed `LATER_CRASHES` more times (backed-off restarts).
const LATER_ROUNDS: usize = 5;
const LATER_CRASHES: usize = 4;
/// Samples of the host-level restarts.
const HOST_RESTARTS: usize = 10;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn host() -> Host {
    Host::new(HostOptions { cache_dir: Some(repo().join("target/bench-component-cache")) }).expect("host")
}

fn shared(host: &Host) -> Shared {
    support::loopback(host, true)
}

/// A small keyless capsule folder pointed at `endpoint`.
fn write_capsule(dir: &Path, endpoint: &str) -> PathBuf {
    let folder = dir.join("capsule");
    std::fs::create_dir_all(&folder).expect("folder");
    let dist = repo().join("components/dist");
    let yaml = format!(
        "name: idle\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: {}/driver-anthropic.wasm\n    gateway: {{endpoint: '{endpoint}', keyless: true}}\ninference: {{model: claude-test, driver: {{artifact: anthropic}}}}\n",
        dist.display()
    );
    std::fs::write(folder.join("murmur.yaml"), yaml).expect("manifest");
    folder
}

fn planned(name: &str, manifest: &Path, work: &Path) -> PlannedCapsule {
    PlannedCapsule { name: name.into(), manifest: manifest.to_path_buf(), workdir: work.join(name), port: 0 }
}

fn stub(turns: usize) -> StubHandle {
    Stub::start(Script::new((0..turns).map(|_| Turn::text("pong")).collect())).expect("stub")
}

/// (median, p90, max) in ms, nearest rank.
fn summary(v: &[f64]) -> (f64, f64, f64) {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = |p: f64| s[(((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize) - 1];
    (rank(50.0), rank(90.0), s[s.len() - 1])
}

fn row(what: &str, v: &[f64]) {
    let (med, p90, max) = summary(v);
    println!("| {what} | {} | {med:.2} | {p90:.2} | {max:.2} |", v.len());
}

fn status_kib(key: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

async fn gateway_restart(h: &Host, work: &Path) {
    let stub = stub(1000);
    let folder = write_capsule(work, &stub.url());
    let host = HostHandle::start(vec![planned("bench", &folder, work)], shared(h), RestartPolicy::default())
        .await
        .expect("host");
    host.settled().await.expect("settled");
    let stub_ms = |stub: &StubHandle| stub.requests().last().map(|r| r.stub_elapsed_ns as f64 / 1e6).unwrap_or(0.0);
    let (mut baseline, mut restart, mut serving, mut later) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for round in 0..SAMPLES {
        if round > 0 {
            host.act("bench", Action::Restart).await.expect("restart");
        }
        let s = host.session("bench").await.expect("host").expect("running");
        let t0 = Instant::now();
        let o = s.submit("ping").await.expect("task");
        assert_eq!(o.exit_status, ExitStatus::Ok, "{}", o.message);
        baseline.push(t0.elapsed().as_secs_f64() * 1e3 - stub_ms(&stub));
        let name = names::gateway(&s.session_id, "anthropic");
        let crashes = if round < LATER_ROUNDS { 1 + LATER_CRASHES } else { 1 };
        for crash in 0..crashes {
            let old = names::lookup::<GatewayMsg>(&name).expect("gateway").get_id();
            let t0 = Instant::now();
            assert!(s.inject_gateway_panic("anthropic"));
            while names::lookup::<GatewayMsg>(&name).is_none_or(|g| g.get_id() == old) {
                tokio::task::yield_now().await;
            }
            let registered = t0.elapsed().as_secs_f64() * 1e3;
            let o = s.submit("ping").await.expect("task");
            assert_eq!(o.exit_status, ExitStatus::Ok, "{}", o.message);
            let served = t0.elapsed().as_secs_f64() * 1e3 - stub_ms(&stub);
            if crash == 0 {
                restart.push(registered);
                serving.push(served);
            } else {
                later.push(served);
            }
        }
    }
    println!("\n### Restart-to-serving after an injected gateway crash\n");
    println!("| measure | samples | median ms | p90 ms | max ms |\n|---|---|---|---|---|");
    row("task, no crash (wall − stub)", &baseline);
    row("first crash in the window: inject → new gateway registered", &restart);
    row("first crash in the window: inject → next task completed (− stub)", &serving);
    row(
        "2nd–5th crash within 10 s: inject → next task completed (− stub; includes the supervisor's 10–80 ms backoff)",
        &later,
    );
    host.shutdown().await.expect("shutdown");
}

async fn host_restart(h: &Host, work: &Path) {
    let stub = stub(10);
    let folder = write_capsule(work, &stub.url());
    let policy = RestartPolicy {
        max_restarts: 1000,
        backoff_initial: Duration::ZERO,
        backoff_max: Duration::ZERO,
        ..RestartPolicy::default()
    };
    let host = HostHandle::start(vec![planned("loop", &folder, work)], shared(h), policy).await.expect("host");
    host.settled().await.expect("settled");
    let http = reqwest::Client::new();
    let (mut entry_ms, mut door_ms, mut manual_ms) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..HOST_RESTARTS {
        let s = host.session("loop").await.expect("host").expect("running");
        let old = s.session_id.clone();
        let stopped = tokio::spawn({
            let s = s.clone();
            async move {
                s.wait_stopped().await;
                Instant::now()
            }
        });
        while !stopped.is_finished() {
            s.inject_gateway_panic("anthropic");
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        let t0 = stopped.await.expect("stopped");
        let e = loop {
            let e = host.get("loop").await.expect("entry");
            if e.state == CapsuleState::Running && e.session_id.as_ref() != Some(&old) {
                break e;
            }
            tokio::task::yield_now().await;
        };
        entry_ms.push(t0.elapsed().as_secs_f64() * 1e3);
        let card = http.get(format!("{}/.well-known/agent-card.json", e.url.expect("url"))).send().await.expect("door");
        assert!(card.status().is_success());
        door_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    for _ in 0..HOST_RESTARTS {
        let t0 = Instant::now();
        let e = host.act("loop", Action::Restart).await.expect("restart");
        let card = http.get(format!("{}/.well-known/agent-card.json", e.url.expect("url"))).send().await.expect("door");
        assert!(card.status().is_success());
        manual_ms.push(t0.elapsed().as_secs_f64() * 1e3);
    }
    println!("\n### Host restart of a capsule (backoff 0)\n");
    println!("| measure | samples | median ms | p90 ms | max ms |\n|---|---|---|---|---|");
    row("supervisor stopped (crash loop) → new session running", &entry_ms);
    row("supervisor stopped (crash loop) → new door answers", &door_ms);
    row("operator restart (graceful stop + launch) → new door answers", &manual_ms);
    host.shutdown().await.expect("shutdown");
}

async fn density(h: &Host, work: &Path) {
    let stub = stub(10);
    let folder = write_capsule(work, &stub.url());
    let fd_note = ensure_nofile(CAPSULES as u64 * 4 + 1024);
    // Warm-up: one capsule, so one-time costs (component in memory, encoder, runtime) are in
    // the baseline and not counted per capsule.
    let warm = HostHandle::start(vec![planned("warm", &folder, work)], shared(h), RestartPolicy::default())
        .await
        .expect("host");
    warm.settled().await.expect("settled");
    warm.shutdown().await.expect("shutdown");
    let actors_before = ractor::registry::registered().len();
    let before = status_kib("VmRSS:");
    let specs: Vec<PlannedCapsule> = (0..CAPSULES).map(|i| planned(&format!("c{i:04}"), &folder, work)).collect();
    let t0 = Instant::now();
    let host = HostHandle::start(specs, shared(h), RestartPolicy::default()).await.expect("host");
    let entries = host.settled().await.expect("settled");
    let start = t0.elapsed();
    let running = entries.iter().filter(|e| e.state == CapsuleState::Running).count();
    if let Some(bad) = entries.iter().find(|e| e.state != CapsuleState::Running) {
        println!("not running: {} {:?} {:?}", bad.name, bad.state, bad.error);
    }
    let after = status_kib("VmRSS:");
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = status_kib("VmRSS:");
    let actors = ractor::registry::registered().len() - actors_before;
    let http = reqwest::Client::new();
    let mut answered = 0;
    for e in entries.iter().step_by(CAPSULES / 20) {
        let url = e.url.clone().unwrap_or_default();
        answered += usize::from(
            http.get(format!("{url}/.well-known/agent-card.json")).send().await.is_ok_and(|r| r.status().is_success()),
        );
    }
    let t1 = Instant::now();
    let end = host.shutdown().await.expect("shutdown");
    let stop = t1.elapsed();
    let stopped = end.iter().filter(|e| e.state == CapsuleState::Stopped).count();
    let mib = |kib: u64| kib as f64 / 1024.0;
    let per = |kib: u64| (kib.saturating_sub(before)) as f64 / CAPSULES as f64 / 1024.0;
    println!("\n### Density and start time ({CAPSULES} idle capsules, one process)\n");
    println!("- {fd_note}");
    println!(
        "- running after start: {running}/{CAPSULES}; registered actors added: {actors}; doors sampled answering: {answered}/20"
    );
    println!("\n| measure | value |\n|---|---|");
    println!("| VmRSS after warm-up (1 capsule started and stopped) | {:.1} MiB |", mib(before));
    println!("| VmRSS right after {CAPSULES} capsules are running | {:.1} MiB |", mib(after));
    println!("| VmRSS after 2 s idle | {:.1} MiB |", mib(idle));
    println!("| marginal RSS per capsule (idle − warm-up) / {CAPSULES} | {:.3} MiB |", per(idle));
    println!("| marginal RSS per capsule, right after start | {:.3} MiB |", per(after));
    println!("| VmHWM (peak) | {:.1} MiB |", mib(status_kib("VmHWM:")));
    println!(
        "| time to start {CAPSULES} capsules (spawn → all running) | {:.0} ms ({:.2} ms per capsule) |",
        start.as_secs_f64() * 1e3,
        start.as_secs_f64() * 1e3 / CAPSULES as f64
    );
    println!(
        "| time to stop {CAPSULES} capsules gracefully ({stopped} stopped) | {:.0} ms |",
        stop.as_secs_f64() * 1e3
    );
}

fn main() {
    // The injected panics are the point; print every other panic as usual.
    let default_hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if !info.to_string().contains("injected panic") {
            default_hook(info);
        }
    }));
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let runs = |name: &str| only.as_deref().is_none_or(|o| name.contains(o));
    rt.block_on(async {
        let h = host();
        let work = tempfile::tempdir().expect("tempdir");
        // Density first: memory freed by the other runs could otherwise be reused by the 1,000
        // capsules and hide part of their cost.
        if runs("density") {
            density(&h, &work.path().join("density")).await;
        }
        if runs("restart") {
            gateway_restart(&h, &work.path().join("gateway")).await;
            host_restart(&h, &work.path().join("host")).await;
        }
    });
}
