//! One sandboxed call at a time, timed by the runtime, for BENCHMARKS.md.
//! Run: `cargo bench --bench calls`
//!
//! - **The file tool lists a folder** (`components/dist/tool-files.wasm`, a folder of five
//!   entries): the call as the tools actor makes it, from a runtime worker, a tool with a
//!   folder, so it runs on a blocking-pool thread with its file operations inline
//!   (`LoadedArtifact::call`).
//! - **A driver's work before it sends, by history length.** `driver-anthropic` and
//!   `driver-openai` get a neutral request of 1 + 2·N messages (N tool calls listing a folder,
//!   each with its result, the shape of the runtime bench's task) with no gateway route, so the
//!   policy refuses the request the driver built: each call is instantiate + read + translate +
//!   the refused `wasi:http` request + the error result. µs per KiB is the call's time over the
//!   request's size; the growth between rows is the per-KiB cost of reading and translating.
//!
//! Next to the file tool: the hop to a blocking-pool thread and back with nothing to run, and
//! two plain threads waking each other, for what a hand-off between threads costs here.
//!
//! `CAPSULE_BENCH_BEFORE=<folder>` adds a row per history length for the drivers of that folder
//! (say, `components/dist` of an earlier commit), measured in the same run, the two builds'
//! calls taking turns, so a change to a driver is compared within one run of a noisy machine.
//!
//! Figures are medians of `CALLS` calls after `WARMUP` untimed ones, in µs: `instantiate` and
//! `call` from `CallOutcome`, `wall` around `call()` (it adds the new store, for the file tool
//! the hop to the call's thread and back, and the store's drop). The last column is what the
//! pool's freed memories keep resident after the row (all slots so far;
//! `CAPSULE_KEEP_RESIDENT=0` keeps none).

use capsule_protocol::manifest::Limits;
use capsule_protocol::neutral::{Block, DriverRequest, Message, Role};
use capsule_runtime::{
    ArtifactRole, Grants, Host, HostOptions, LoadedArtifact, NoEvents, OutgoingPolicy, Scope, ToolAhead, ToolInput,
    ToolStatus, Waits, gateway_address,
};
use serde_json::json;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

const CALLS: usize = 300;
const WARMUP: usize = 20;
/// History lengths (tool calls so far) of the driver rows.
const HISTORY: [usize; 5] = [0, 10, 50, 100, 200];

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// Medians of (instantiate, call, wall) over `CALLS` calls; `check` sees every result.
async fn time(
    host: &Host,
    artifact: &LoadedArtifact,
    grants: &Grants,
    data: &str,
    check: impl Fn(&capsule_runtime::CallOutcome),
) -> (f64, f64, f64) {
    time_each(host, &[artifact], grants, data, check).await.remove(0)
}

/// [`time`] for several builds of one artifact, their calls taking turns, so that the machine's
/// noise falls on each alike.
async fn time_each(
    host: &Host,
    artifacts: &[&LoadedArtifact],
    grants: &Grants,
    data: &str,
    check: impl Fn(&capsule_runtime::CallOutcome),
) -> Vec<(f64, f64, f64)> {
    let mut samples = vec![(Vec::new(), Vec::new(), Vec::new()); artifacts.len()];
    for i in 0..WARMUP + CALLS {
        for (artifact, (inst, call, wall)) in artifacts.iter().zip(&mut samples) {
            let t0 = Instant::now();
            let input = ToolInput { data: Some(data.to_string()), log_path: None };
            let out = artifact.call(host, grants, Arc::new(NoEvents), input).await;
            let w = t0.elapsed();
            check(&out);
            if i >= WARMUP {
                inst.push(out.instantiate_time.as_secs_f64() * 1e6);
                call.push(out.call_time.as_secs_f64() * 1e6);
                wall.push(w.as_secs_f64() * 1e6);
            }
        }
    }
    samples.into_iter().map(|(inst, call, wall)| (median(inst), median(call), median(wall))).collect()
}

/// The neutral request after `turns` folder listings.
fn request(turns: usize) -> String {
    let mut messages = vec![Message::user_text("List the folder, and again after each answer.")];
    for i in 0..turns {
        let id = format!("call_{i}");
        let call = Block::ToolCall { id: id.clone(), name: "files".into(), input: json!({"op": "list", "path": "."}) };
        messages.push(Message {
            role: Role::Assistant,
            content: vec![call],
            tool_call_id: None,
            is_error: None,
            produced_by: None,
        });
        let listing = "Cargo.toml\nREADME.md\nsrc/\nsrc/lib.rs\nsrc/main.rs\ntests/\nnotes.txt\n";
        messages.push(Message::tool_result(&id, listing, false));
    }
    let request = DriverRequest {
        model: "bench-model".into(),
        max_tokens: 1024,
        system: "You are a careful agent.".into(),
        messages,
        tools: Vec::new(),
        params: serde_json::Map::new(),
        continuation_id: None,
        prompt_cache_key: "bench:0.1.0".into(),
    };
    serde_json::to_string(&request).expect("serializes")
}

/// The pool's idle resident memory in KiB, for a table cell.
fn kib(bytes: Option<usize>) -> String {
    bytes.map_or("—".into(), |b| (b / 1024).to_string())
}

fn limits() -> Limits {
    Limits { deadline_seconds: 120, ..Limits::default() }
}

async fn file_tool(host: &Host) {
    let tool =
        LoadedArtifact::load_file(host, "files", &repo().join("components/dist/tool-files.wasm")).expect("loads");
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::create_dir(dir.path().join("src")).expect("mkdir");
    for f in ["Cargo.toml", "README.md", "notes.txt", "src/lib.rs"] {
        std::fs::write(dir.path().join(f), "x").expect("write");
    }
    let grants = Grants {
        role: ArtifactRole::Tool,
        env: Vec::new().into(),
        preopen: Some(Scope { workdir: dir.path().to_path_buf(), relative: ".".into() }),
        limits: limits(),
        policy: OutgoingPolicy::default(),
        disk: Default::default(),
    };
    let listed = |o: &capsule_runtime::CallOutcome| {
        let r = o.result.as_ref().expect("the tool returns");
        assert!(r.data.as_deref().unwrap_or("").contains("Cargo.toml"), "{r:?}");
    };
    let (i, c, w) = time(host, &tool, &grants, r#"{"op":"list","path":"."}"#, listed).await;
    println!("## The file tool lists a folder ({CALLS} calls, medians, µs)\n");
    let kept = kib(host.idle_memory_resident());
    println!(
        "| instantiate | call | wall | idle slots resident KiB |\n|---|---|---|---|\n| {i:.0} | {c:.0} | {w:.0} | {kept} |\n"
    );
    made_in_a_wait(host, &tool, &grants, dir.path()).await;
    // What the call's thread costs by itself: a blocking-pool task that does nothing, awaited
    // from the worker as the call is.
    let mut hops = Vec::new();
    for i in 0..WARMUP + CALLS {
        let t0 = Instant::now();
        tokio::task::spawn_blocking(|| ()).await.expect("the empty task");
        if i >= WARMUP {
            hops.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    println!("The hop alone (an empty blocking-pool task, awaited): {:.0} µs\n", median(hops));
    println!("Two plain threads waking each other (a condvar round trip): {:.0} µs\n", thread_round_trip());
}

/// The file tool's call in an instance made in a provider's wait, as the tools actor calls it
/// (`call_tool_ahead`), its scope a folder `data` below `root`: the call keeps the WASI context
/// made with the folder found in the wait, or, when the folder was not there in the wait (moved
/// aside during it, back before the call), builds it at the call, as every call did before the
/// context was made in the wait. The two take turns.
async fn made_in_a_wait(host: &Host, tool: &LoadedArtifact, grants: &Grants, root: &std::path::Path) {
    let data = root.join("data");
    std::fs::create_dir(&data).expect("mkdir");
    for f in ["Cargo.toml", "README.md", "notes.txt"] {
        std::fs::write(data.join(f), "x").expect("write");
    }
    let grants =
        Grants { preopen: Some(Scope { workdir: root.to_path_buf(), relative: "data".into() }), ..grants.clone() };
    let waits = Waits::default();
    let mut ahead = ToolAhead::first(tool, host, &grants, &waits);
    let mut rows = [(Vec::new(), Vec::new(), Vec::new()), (Vec::new(), Vec::new(), Vec::new())];
    for i in 0..WARMUP + CALLS {
        for (found, (inst, call, wall)) in [true, false].into_iter().zip(&mut rows) {
            if !found {
                std::fs::rename(&data, root.join("away")).expect("move aside");
            }
            waits.out();
            while !ahead.is_ready() {
                tokio::time::sleep(std::time::Duration::from_millis(1)).await;
            }
            if !found {
                std::fs::rename(root.join("away"), &data).expect("move back");
            }
            let input = ToolInput { data: Some(r#"{"op":"list","path":"."}"#.into()), log_path: None };
            let t0 = Instant::now();
            let out = tool.call_tool_ahead(host, &grants, Arc::new(NoEvents), input, &mut ahead, &waits).await;
            let w = t0.elapsed();
            assert!(out.made_ahead, "the call ran in the instance made in the wait");
            let r = out.result.as_ref().expect("the tool returns");
            assert!(r.data.as_deref().unwrap_or("").contains("Cargo.toml"), "{r:?}");
            if i >= WARMUP {
                inst.push(out.instantiate_time.as_secs_f64() * 1e6);
                call.push(out.call_time.as_secs_f64() * 1e6);
                wall.push(w.as_secs_f64() * 1e6);
            }
        }
    }
    println!(
        "### The same, in an instance made in a provider's wait (`call_tool_ahead`, {CALLS} calls each, taking turns, medians, µs)\n"
    );
    println!("| the folder's WASI context | instantiate (taken) | call | wall |\n|---|---|---|---|");
    for (label, (inst, call, wall)) in
        ["made in the wait, kept at the call", "built at the call (the folder not found in the wait)"]
            .into_iter()
            .zip(rows)
    {
        println!("| {label} | {:.0} | {:.0} | {:.0} |", median(inst), median(call), median(wall));
    }
    println!();
}

/// The median round trip of two threads that wake each other through a condvar, µs: what the
/// machine charges to hand work to a sleeping thread and back, without tokio.
fn thread_round_trip() -> f64 {
    let turn = Arc::new((std::sync::Mutex::new(0usize), std::sync::Condvar::new()));
    let theirs = turn.clone();
    let rounds = WARMUP + CALLS;
    let other = std::thread::spawn(move || {
        let (lock, wake) = &*theirs;
        for i in 0..rounds {
            let mut n = wake.wait_while(lock.lock().expect("lock"), |n| *n != 2 * i + 1).expect("wait");
            *n += 1;
            wake.notify_one();
        }
    });
    let (lock, wake) = &*turn;
    let mut trips = Vec::new();
    for i in 0..rounds {
        let t0 = Instant::now();
        let mut n = lock.lock().expect("lock");
        *n += 1;
        wake.notify_one();
        drop(wake.wait_while(n, |n| *n != 2 * i + 2).expect("wait"));
        if i >= WARMUP {
            trips.push(t0.elapsed().as_secs_f64() * 1e6);
        }
    }
    other.join().expect("the other thread");
    median(trips)
}

async fn driver(host: &Host, name: &str) {
    let mut builds = vec![("now", repo().join("components/dist"))];
    if let Some(before) = std::env::var_os("CAPSULE_BENCH_BEFORE") {
        builds.insert(0, ("before", PathBuf::from(before)));
    }
    let artifacts: Vec<(&str, LoadedArtifact)> = builds
        .iter()
        .map(|(label, dir)| {
            let path = dir.join(format!("driver-{name}.wasm"));
            (*label, LoadedArtifact::load_file(host, name, &path).unwrap_or_else(|e| panic!("{}: {e}", path.display())))
        })
        .collect();
    let env = [
        ("MURMUR_INFERENCE_ENDPOINT", gateway_address()),
        ("MURMUR_INFERENCE_MODEL", "bench-model".to_string()),
        ("MURMUR_INFERENCE_DRIVER", name.to_string()),
        ("MURMUR_INFERENCE_TRANSPORT", "http".to_string()),
    ];
    let grants = Grants {
        role: ArtifactRole::Driver,
        env: env.iter().map(|(k, v)| (k.to_string(), v.clone())).collect(),
        preopen: None,
        limits: limits(),
        policy: OutgoingPolicy::default(),
        disk: Default::default(),
    };
    let refused = |o: &capsule_runtime::CallOutcome| {
        let r = o.result.as_ref().expect("the driver returns");
        assert_eq!(r.status, ToolStatus::Failed, "{r:?}");
        assert!(r.summary.as_deref().unwrap_or("").contains("HttpRequestDenied"), "{r:?}");
    };
    println!("## driver-{name}: the request refused by policy, by history length ({CALLS} calls each, medians, µs)\n");
    println!(
        "| tool calls in the history | build | request bytes | instantiate | call | wall | call µs per KiB | idle slots resident KiB |"
    );
    println!("|---|---|---|---|---|---|---|---|");
    let loaded: Vec<&LoadedArtifact> = artifacts.iter().map(|(_, artifact)| artifact).collect();
    for turns in HISTORY {
        let data = request(turns);
        let timed = time_each(host, &loaded, &grants, &data, refused).await;
        for ((label, _), (i, c, w)) in artifacts.iter().zip(timed) {
            let per_kib = c / (data.len() as f64 / 1024.0);
            let kept = kib(host.idle_memory_resident());
            println!("| {turns} | {label} | {} | {i:.0} | {c:.0} | {w:.0} | {per_kib:.1} | {kept} |", data.len());
        }
    }
    println!();
}

fn main() {
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    // The runtime `capsule run` runs on (one worker). Spawned: the calls run on that worker, as
    // the tools actor's and the gateway's do, not on the thread that waits in `block_on`.
    let rt = capsule_actors::workers::runtime(capsule_actors::workers::Workers::One).expect("runtime");
    let calls = rt.spawn(async {
        let cache = repo().join("target/bench-component-cache");
        let host = Host::new(HostOptions { cache_dir: Some(cache) }).expect("host");
        println!("# One call at a time\n");
        file_tool(&host).await;
        driver(&host, "anthropic").await;
        driver(&host, "openai").await;
    });
    rt.block_on(calls).expect("the bench's calls");
}
