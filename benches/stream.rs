//! Stream and coalescer benchmarks for BENCHMARKS.md. Run: `cargo bench --bench stream`
//!
//! - **Coalescer throughput**: `tool-call-input-bytes` reports per second through
//!   `capsule_actors::coalescer::ProgressRules` called directly, and through the `Coalescer`
//!   actor (one cast per report, as the driver sink sends them, then one `CompleteAll` call that
//!   waits for all of them), with a real `Emitter` behind it.
//! - **Emitter fan-out**: a real session with its door on loopback, 100 `stream/watch`
//!   connections read with reqwest, frames emitted through the session's emitter
//!   (`EmitterMsg::Emit`); frames delivered to all readers per second, lossless (a window keeps
//!   fewer frames in flight than a subscriber's queue) and as a burst (whatever the readers keep
//!   up with; losses are reported by `lagged` frames and counted).
//! - **Frame latency**: a real driver streams text deltas from the stub (`event_interval_ms`
//!   pacing); a reqwest SSE reader on `stream/watch` timestamps each `text` frame on arrival and
//!   compares with the instant the stub handed that delta to its HTTP server
//!   (`RecordedRequest.event_sent_unix_ns`). Split into its two halves: stub → the driver's
//!   `emit-chunk` (the driver called directly), and an emitter cast → client read (the bench
//!   casts frames stamped with their send time, which is what the driver sink's `chunk` does).

use capsule_actors::coalescer::{Coalescer, CoalescerMsg, ProgressRules};
use capsule_actors::emitter::{Emitter, EmitterArgs, EmitterMsg};
use capsule_actors::names::{self, role};
use capsule_actors::{LaunchOptions, Session, door};
use capsule_protocol::frame::Frame;
use capsule_protocol::manifest::Limits;
use capsule_protocol::neutral::{DriverRequest, Message};
use capsule_runtime::{
    ArtifactRole, GatewayRoute, Grants, GuestEvents, Host, HostOptions, LoadedArtifact, OutgoingPolicy, ToolInput,
    ToolStatus, gateway_address,
};
use capsule_stub::{Script, Stub, StubHandle, Turn};
use futures::StreamExt;
use ractor::{Actor, ActorRef};
use std::collections::HashMap;
use std::hint::black_box;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::sync::Notify;

/// Watchers for the fan-out.
const WATCHERS: usize = 100;
/// Frames in flight at most in the lossless fan-out (a subscriber's queue holds 128).
const WINDOW: u64 = 100;
/// Frames emitted per fan-out run.
const FANOUT_FRAMES: u64 = 10_000;
/// Text deltas in a latency run, and the stub's pause between two SSE events.
const LATENCY_DELTAS: usize = 1000;
const LATENCY_INTERVAL_MS: u64 = 2;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn now_ns() -> u128 {
    SystemTime::now().duration_since(UNIX_EPOCH).expect("clock").as_nanos()
}

/// Nearest-rank percentile of an unsorted sample.
fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank - 1]
}

fn host() -> Host {
    Host::new(HostOptions { cache_dir: Some(repo().join("target/bench-component-cache")) }).expect("host")
}

// ---------------------------------------------------------------------------------------------
// Coalescer
// ---------------------------------------------------------------------------------------------

/// Reports/s through `ProgressRules`, `calls` calls written at once (round-robin reports), with
/// `Instant::now()` taken per report as the actor does. Returns (reports/s, frames it would write).
fn rules_rate(reports: u64, calls: usize) -> (f64, u64) {
    let ids: Vec<String> = (0..calls).map(|i| format!("toolu_{i:024}")).collect();
    let mut rules = ProgressRules::default();
    let t0 = Instant::now();
    let mut frames = 0u64;
    for id in &ids {
        frames += u64::from(rules.start("tsk_bench", id));
    }
    for i in 0..reports {
        let id = &ids[(i % calls as u64) as usize];
        let bytes = (i / calls as u64 + 1) * 16;
        frames += u64::from(rules.report(black_box(id), bytes, tokio::time::Instant::now()).is_some());
    }
    frames += rules.complete_all().len() as u64;
    let secs = t0.elapsed().as_secs_f64();
    (reports as f64 / secs, black_box(frames))
}

/// Reports/s through the actor: `Started` per call, then one `Progress` cast per report (each
/// with its own task-id and call-id `String`s, as the driver sink sends them), then one
/// `CompleteAll` call, which returns after every earlier cast was handled. Returns (reports/s,
/// frames the emitter numbered).
async fn actor_rate(
    coalescer: &ActorRef<CoalescerMsg>,
    emitter: &ActorRef<EmitterMsg>,
    reports: u64,
    calls: usize,
) -> (f64, u64) {
    let ids: Vec<String> = (0..calls).map(|i| format!("toolu_{i:024}")).collect();
    let last = |e: &ActorRef<EmitterMsg>| {
        let e = e.clone();
        async move {
            e.call(EmitterMsg::LastId, Some(Duration::from_secs(60))).await.expect("emitter answers").expect("success")
        }
    };
    coalescer.cast(CoalescerMsg::Reset).expect("cast");
    let before = last(emitter).await;
    let t0 = Instant::now();
    for id in &ids {
        coalescer
            .cast(CoalescerMsg::Started { task_id: "tsk_bench".into(), id: id.clone(), name: "files".into() })
            .expect("cast");
    }
    for i in 0..reports {
        let id = &ids[(i % calls as u64) as usize];
        let bytes = (i / calls as u64 + 1) * 16;
        coalescer.cast(CoalescerMsg::Progress { task_id: "tsk_bench".into(), id: id.clone(), bytes }).expect("cast");
    }
    coalescer
        .call(CoalescerMsg::CompleteAll, Some(Duration::from_secs(300)))
        .await
        .expect("coalescer answers")
        .expect("success");
    let secs = t0.elapsed().as_secs_f64();
    let frames = last(emitter).await - before;
    (reports as f64 / secs, frames)
}

async fn coalescer() {
    const DIRECT: u64 = 5_000_000;
    const VIA_ACTOR: u64 = 1_000_000;
    let mut rows = Vec::new();
    for calls in [1usize, 100] {
        let runs: Vec<(f64, u64)> = (0..3).map(|_| rules_rate(DIRECT, calls)).collect();
        let rates: Vec<f64> = runs.iter().map(|r| r.0).collect();
        rows.push(("`ProgressRules` direct", calls, DIRECT, pct(&rates, 50.0), runs[0].1));
    }
    let emitter_name = "bench-coalescer/emitter".to_string();
    let (emitter, eh) = Actor::spawn(
        Some(emitter_name.clone()),
        Emitter,
        EmitterArgs { next_id: Arc::new(AtomicU64::new(1)), frames_path: None },
    )
    .await
    .expect("emitter");
    let (coal, ch) = Actor::spawn(
        Some("bench-coalescer/coalescer".into()),
        Coalescer,
        capsule_actors::peer::Peer::of("bench-coalescer", "emitter"),
    )
    .await
    .expect("coalescer");
    for calls in [1usize, 100] {
        let mut runs = Vec::new();
        for _ in 0..3 {
            runs.push(actor_rate(&coal, &emitter, VIA_ACTOR, calls).await);
        }
        let rates: Vec<f64> = runs.iter().map(|r| r.0).collect();
        rows.push((
            "`Coalescer` actor: casts + final `CompleteAll` call",
            calls,
            VIA_ACTOR,
            pct(&rates, 50.0),
            runs[0].1,
        ));
    }
    coal.stop(None);
    emitter.stop(None);
    let _ = ch.await;
    let _ = eh.await;
    println!("\n## Coalescer throughput (median of 3 runs)\n");
    println!(
        "Direct: `start` per call, then `report(id, bytes, Instant::now())` per report (cumulative sizes rising by 16 bytes, calls in round-robin), then `complete_all`; time over all of it. Actor: the same reports as `Progress` casts to a spawned `Coalescer` (with a spawned `Emitter` behind it), timed from the first cast to the answer of one final `CompleteAll` call (mailbox order: every report was handled). Frames = progress/started frames the rules let through (first report, one per call per 250 ms, the flush).\n"
    );
    println!("| path | calls being written | reports | reports/s (M) | frames written |");
    println!("|---|---|---|---|---|");
    for (path, calls, n, rate, frames) in rows {
        println!("| {path} | {calls} | {n} | {:.2} | {frames} |", rate / 1e6);
    }
}

// ---------------------------------------------------------------------------------------------
// A session with its door
// ---------------------------------------------------------------------------------------------

struct Served {
    session: Arc<Session>,
    door: door::Door,
    _dir: tempfile::TempDir,
    _work: tempfile::TempDir,
}

impl Served {
    async fn start(stub: &StubHandle, host: &Host) -> Served {
        let dir = tempfile::tempdir().expect("capsule dir");
        let work = tempfile::tempdir().expect("workdir");
        let yaml = format!(
            "name: bench-stream\nversion: 0.1.0\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: {}\n    gateway: {{endpoint: '{}', keyless: true}}\ninference:\n  model: claude-bench\n  driver: {{artifact: anthropic}}\n",
            repo().join("components/dist/driver-anthropic.wasm").display(),
            stub.url()
        );
        std::fs::write(dir.path().join("murmur.yaml"), yaml).expect("manifest");
        let opts = LaunchOptions {
            manifest: dir.path().into(),
            workdir: work.path().into(),
            host: host.clone(),
            env: HashMap::new(),
            endpoint_override: None,
            host_config: None,
            machine: None,
        };
        let session = Arc::new(Session::launch(opts).await.expect("launch"));
        let door = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
        Served { session, door, _dir: dir, _work: work }
    }

    fn emitter(&self) -> ActorRef<EmitterMsg> {
        names::lookup::<EmitterMsg>(&names::name(&self.session.session_id, role::EMITTER))
            .expect("the session's emitter")
    }

    async fn stop(self) {
        self.session.shutdown().await;
        self.door.close();
    }
}

/// Opens a `stream/watch` connection and hands every frame to `on_frame(event, data, arrival
/// ns)` until it returns false or the stream ends. The arrival instant is taken once per read
/// from the socket. Returns once the response head is in (the subscription exists then).
async fn watch<F>(client: &reqwest::Client, url: &str, mut on_frame: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut(&str, &str, u128) -> bool + Send + 'static,
{
    let resp = client
        .post(url)
        .header("content-type", "application/json")
        .body(r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch"}"#)
        .send()
        .await
        .expect("watch");
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    tokio::spawn(async move {
        let mut stream = resp.bytes_stream();
        let mut buf: Vec<u8> = Vec::with_capacity(64 * 1024);
        while let Some(chunk) = stream.next().await {
            let Ok(chunk) = chunk else { return };
            let at = now_ns();
            buf.extend_from_slice(&chunk);
            let mut start = 0;
            while let Some(end) = buf[start..].windows(2).position(|w| w == b"\n\n") {
                let block = std::str::from_utf8(&buf[start..start + end]).expect("utf-8");
                start += end + 2;
                if block.starts_with(':') {
                    continue;
                }
                let (mut event, mut data) = ("", "");
                for line in block.lines() {
                    if let Some(v) = line.strip_prefix("event: ") {
                        event = v;
                    } else if let Some(v) = line.strip_prefix("data: ") {
                        data = v;
                    }
                }
                if !on_frame(event, data, at) {
                    return;
                }
            }
            buf.drain(..start);
        }
    })
}

// ---------------------------------------------------------------------------------------------
// Fan-out
// ---------------------------------------------------------------------------------------------

#[derive(Default)]
struct Reader {
    window: AtomicU64,
    burst: AtomicU64,
    sentinels: AtomicU64,
    missed: AtomicU64,
}

struct FanoutRow {
    mode: &'static str,
    emitted: u64,
    delivered: u64,
    lost: u64,
    lagged_missed: u64,
    secs: f64,
}

fn text_frame(text: String) -> EmitterMsg {
    EmitterMsg::Emit(Frame::Text { id: "tsk_bench".into(), text, is_final: false })
}

async fn fanout(host: &Host) -> Vec<FanoutRow> {
    let stub = Stub::start(Script::new(Vec::new())).expect("stub");
    let served = Served::start(&stub, host).await;
    let emitter = served.emitter();
    let client = reqwest::Client::new();
    let notify = Arc::new(Notify::new());
    let mut readers = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..WATCHERS {
        let r = Arc::new(Reader::default());
        let (r2, n2) = (r.clone(), notify.clone());
        tasks.push(
            watch(&client, &served.door.url(), move |event, data, _| {
                match event {
                    "text" if data.contains(r#""text":"w"#) => {
                        r2.window.fetch_add(1, Ordering::Relaxed);
                    }
                    "text" if data.contains(r#""text":"b"#) => {
                        r2.burst.fetch_add(1, Ordering::Relaxed);
                    }
                    "text" if data.contains(r#""text":"END""#) => {
                        r2.sentinels.fetch_add(1, Ordering::Relaxed);
                    }
                    "lagged" => {
                        let v: serde_json::Value = serde_json::from_str(data).expect("lagged data");
                        r2.missed.fetch_add(v["missed"].as_u64().expect("missed"), Ordering::Relaxed);
                    }
                    "capsule-closed" => return false,
                    _ => {}
                }
                n2.notify_one();
                true
            })
            .await,
        );
        readers.push(r);
    }
    let min = |f: fn(&Reader) -> u64| readers.iter().map(|r| f(r)).min().unwrap_or(0);
    let sum = |f: fn(&Reader) -> u64| readers.iter().map(|r| f(r)).sum::<u64>();
    // The payload: ~40 bytes of text, as a few tokens of a reply.
    let payload = |kind: char, i: u64| format!("{kind}{i:07} the quick brown fox jumps over");
    let mut rows = Vec::new();

    // Lossless: never more than WINDOW frames emitted beyond what the slowest reader has read.
    let t0 = Instant::now();
    for i in 0..FANOUT_FRAMES {
        loop {
            let notified = notify.notified();
            if i - min(|r| r.window.load(Ordering::Relaxed)) < WINDOW {
                break;
            }
            notified.await;
        }
        emitter.cast(text_frame(payload('w', i))).expect("emit");
    }
    while min(|r| r.window.load(Ordering::Relaxed)) < FANOUT_FRAMES {
        let notified = notify.notified();
        if min(|r| r.window.load(Ordering::Relaxed)) >= FANOUT_FRAMES {
            break;
        }
        let _ = tokio::time::timeout(Duration::from_millis(50), notified).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let delivered = sum(|r| r.window.load(Ordering::Relaxed));
    rows.push(FanoutRow {
        mode: "lossless (window of 100 frames)",
        emitted: FANOUT_FRAMES,
        delivered,
        lost: FANOUT_FRAMES * WATCHERS as u64 - delivered,
        lagged_missed: sum(|r| r.missed.load(Ordering::Relaxed)),
        secs,
    });

    // Burst: emit as fast as the emitter takes casts, then a sentinel every millisecond until
    // every reader has one (a reader that lagged is told so before its next delivered frame).
    let missed_before = sum(|r| r.missed.load(Ordering::Relaxed));
    let t0 = Instant::now();
    for i in 0..FANOUT_FRAMES {
        emitter.cast(text_frame(payload('b', i))).expect("emit");
    }
    while min(|r| r.sentinels.load(Ordering::Relaxed)) == 0 {
        emitter.cast(text_frame("END".into())).expect("emit");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let secs = t0.elapsed().as_secs_f64();
    let delivered = sum(|r| r.burst.load(Ordering::Relaxed));
    rows.push(FanoutRow {
        mode: "burst (no flow control)",
        emitted: FANOUT_FRAMES,
        delivered,
        lost: FANOUT_FRAMES * WATCHERS as u64 - delivered,
        lagged_missed: sum(|r| r.missed.load(Ordering::Relaxed)) - missed_before,
        secs,
    });
    served.stop().await;
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(10), t).await;
    }
    rows
}

// ---------------------------------------------------------------------------------------------
// Latency
// ---------------------------------------------------------------------------------------------

/// 8-character pieces that say their own number, so a frame is matched to its delta by text.
fn latency_pieces() -> Vec<String> {
    (0..LATENCY_DELTAS).map(|j| format!("{j:07}|")).collect()
}

fn latency_stub() -> StubHandle {
    let text: String = latency_pieces().concat();
    let mut script =
        Script::new(vec![Turn { text: Some(text), event_interval_ms: Some(LATENCY_INTERVAL_MS), ..Turn::default() }]);
    script.chunk_chars = 8;
    Stub::start(script).expect("stub")
}

/// The stub's hand-over instant of each text delta: the Anthropic stream is message_start, ping,
/// content_block_start, the deltas, content_block_stop, message_delta, message_stop.
fn delta_sent(stub: &StubHandle) -> Vec<u128> {
    let sent = stub.requests().into_iter().next().expect("a request").event_sent_unix_ns;
    assert_eq!(sent.len(), LATENCY_DELTAS + 6, "one instant per SSE event");
    sent[3..3 + LATENCY_DELTAS].to_vec()
}

struct LatencyRow {
    path: &'static str,
    watchers: usize,
    ms: Vec<f64>,
}

type Arrivals = Arc<Mutex<Vec<(u128, String)>>>;

/// Full path: stub → driver → sink → emitter → door → reqwest, with `watchers` readers.
async fn latency_full(host: &Host, watchers: usize) -> LatencyRow {
    let stub = latency_stub();
    let served = Served::start(&stub, host).await;
    let client = reqwest::Client::new();
    let mut logs: Vec<Arrivals> = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let log: Arrivals = Arc::default();
        let l2 = log.clone();
        tasks.push(
            watch(&client, &served.door.url(), move |event, data, at| {
                match event {
                    "text" => {
                        let v: serde_json::Value = serde_json::from_str(data).expect("text data");
                        let text = v["text"].as_str().expect("text").to_string();
                        if !text.is_empty() {
                            l2.lock().expect("log").push((at, text));
                        }
                    }
                    "status" if data.contains(r#""final":true"#) => return false,
                    _ => {}
                }
                true
            })
            .await,
        );
        logs.push(log);
    }
    let outcome = served.session.submit("go").await.expect("the loop answers");
    assert_eq!(outcome.exit_status, capsule_protocol::trace::ExitStatus::Ok, "{}", outcome.message);
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t)
            .await
            .expect("readers end at the final status")
            .expect("reader");
    }
    let sent = delta_sent(&stub);
    let pieces = latency_pieces();
    let mut ms = Vec::new();
    for log in &logs {
        let log = log.lock().expect("log");
        assert_eq!(log.len(), LATENCY_DELTAS, "every delta reached every watcher");
        for (j, (at, text)) in log.iter().enumerate() {
            assert_eq!(text, &pieces[j], "frames in delta order");
            ms.push((*at as f64 - sent[j] as f64) / 1e6);
        }
    }
    served.stop().await;
    LatencyRow { path: "stub hands a delta over → client reads its `text` frame (full path)", watchers, ms }
}

/// Timestamps each `emit-chunk` as the driver makes it.
#[derive(Default)]
struct ChunkTimes(Mutex<Vec<(u128, String)>>);

impl GuestEvents for ChunkTimes {
    fn chunk(&self, text: String) {
        let at = now_ns();
        self.0.lock().expect("times").push((at, text));
    }
    fn thinking(&self, _: String) {}
    fn tool_call_started(&self, _: String, _: String) {}
    fn tool_call_input_bytes(&self, _: String, _: u64) {}
}

/// First half: stub → the driver's `emit-chunk`, the driver called directly (no actors).
async fn latency_driver(host: &Host) -> LatencyRow {
    let stub = latency_stub();
    let artifact = LoadedArtifact::load_file(host, "anthropic", &repo().join("components/dist/driver-anthropic.wasm"))
        .expect("driver");
    let grants = Grants {
        role: ArtifactRole::Driver,
        env: vec![
            ("MURMUR_INFERENCE_ENDPOINT".into(), gateway_address()),
            ("MURMUR_INFERENCE_MODEL".into(), "claude-bench".into()),
        ],
        preopen: None,
        disk: Default::default(),
        limits: Limits { deadline_seconds: 60, ..Limits::default() },
        policy: OutgoingPolicy {
            allow: Vec::new(),
            gateway: Some(GatewayRoute {
                endpoint: stub.url().parse().expect("url"),
                fixed: None,
                key: None,
                style: Default::default(),
            }),
        },
    };
    let request = DriverRequest {
        model: "claude-bench".into(),
        max_tokens: 1024,
        system: String::new(),
        messages: vec![Message::user_text("go")],
        tools: Vec::new(),
        params: serde_json::Map::new(),
        continuation_id: None,
        prompt_cache_key: "bench:0.1.0".into(),
    };
    let times = Arc::new(ChunkTimes::default());
    let o = artifact
        .call(
            host,
            &grants,
            times.clone(),
            ToolInput { data: Some(serde_json::to_string(&request).expect("json")), log_path: None },
        )
        .await;
    assert_eq!(o.result.expect("result").status, ToolStatus::Passed);
    let sent = delta_sent(&stub);
    let pieces = latency_pieces();
    let log = times.0.lock().expect("times");
    assert_eq!(log.len(), LATENCY_DELTAS);
    let ms = log
        .iter()
        .enumerate()
        .map(|(j, (at, text))| {
            assert_eq!(text, &pieces[j]);
            (*at as f64 - sent[j] as f64) / 1e6
        })
        .collect();
    LatencyRow { path: "stub hands a delta over → driver's `emit-chunk` (driver called directly)", watchers: 0, ms }
}

/// Second half: a cast to the session's emitter (what the driver sink's `chunk` does) → client
/// reads the frame; each frame's text carries its cast instant.
async fn latency_emitter(host: &Host, watchers: usize) -> LatencyRow {
    let stub = Stub::start(Script::new(Vec::new())).expect("stub");
    let served = Served::start(&stub, host).await;
    let emitter = served.emitter();
    let client = reqwest::Client::new();
    let mut logs: Vec<Arc<Mutex<Vec<f64>>>> = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..watchers {
        let log: Arc<Mutex<Vec<f64>>> = Arc::default();
        let l2 = log.clone();
        tasks.push(
            watch(&client, &served.door.url(), move |event, data, at| {
                if event == "text" {
                    let v: serde_json::Value = serde_json::from_str(data).expect("text data");
                    let text = v["text"].as_str().expect("text");
                    if text == "END" {
                        return false;
                    }
                    let sent: u128 = text.parse().expect("a timestamp");
                    l2.lock().expect("log").push((at as f64 - sent as f64) / 1e6);
                }
                true
            })
            .await,
        );
        logs.push(log);
    }
    for _ in 0..LATENCY_DELTAS {
        emitter.cast(text_frame(now_ns().to_string())).expect("emit");
        tokio::time::sleep(Duration::from_millis(LATENCY_INTERVAL_MS)).await;
    }
    emitter.cast(text_frame("END".into())).expect("emit");
    for t in tasks {
        tokio::time::timeout(Duration::from_secs(30), t).await.expect("readers end").expect("reader");
    }
    let mut ms = Vec::new();
    for log in &logs {
        let log = log.lock().expect("log");
        assert_eq!(log.len(), LATENCY_DELTAS, "no frame lost at this pace");
        ms.extend_from_slice(&log);
    }
    served.stop().await;
    LatencyRow {
        path: "emitter cast (`EmitterMsg::Emit`, as the driver sink's `chunk`) → client reads the frame",
        watchers,
        ms,
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!(
        "# Stream and coalescer benchmarks ({} cores)",
        std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1)
    );
    rt.block_on(async {
        coalescer().await;

        let host = host();
        let rows = fanout(&host).await;
        println!("\n## Emitter fan-out to {WATCHERS} SSE subscribers on loopback\n");
        println!("A real session with its door (`capsule_actors::door::serve`) on 127.0.0.1; {WATCHERS} `stream/watch` connections read with reqwest (each parses its SSE and counts `text` frames); {FANOUT_FRAMES} `text` frames (~40 bytes of text, ~110 bytes on the wire) cast to the session's emitter. delivered/s = `text` frames received by all readers together / time from the first cast until the last reader had them all (lossless) or had seen the end marker (burst). lost = emitted × readers − delivered; lagged = the sum of `missed` in the `lagged` frames the readers got.\n");
        println!("| mode | readers | frames emitted | delivered | lost | lagged (missed) | seconds | delivered frames/s (k) |");
        println!("|---|---|---|---|---|---|---|---|");
        for r in &rows {
            println!("| {} | {WATCHERS} | {} | {} | {} | {} | {:.2} | {:.1} |", r.mode, r.emitted, r.delivered, r.lost, r.lagged_missed, r.secs, r.delivered as f64 / r.secs / 1e3);
        }

        let lat = vec![latency_full(&host, 1).await, latency_full(&host, WATCHERS).await, latency_driver(&host).await, latency_emitter(&host, 1).await, latency_emitter(&host, WATCHERS).await];
        println!("\n## Frame latency: driver emit-chunk → client read\n");
        println!("{LATENCY_DELTAS} text deltas of 8 characters from the stub, one SSE event every {LATENCY_INTERVAL_MS} ms (`event_interval_ms`), through the real Anthropic driver. The stub records when it hands each event to its HTTP server (`event_sent_unix_ns`); each reader (reqwest, `stream/watch`) takes the wall clock when the read holding a frame returns; same process, same clock. Samples = deltas × readers.\n");
        println!("| path | readers | samples | p50 ms | p90 ms | p99 ms | max ms |");
        println!("|---|---|---|---|---|---|---|");
        for r in &lat {
            let readers = if r.watchers == 0 { "—".to_string() } else { r.watchers.to_string() };
            println!("| {} | {readers} | {} | {:.3} | {:.3} | {:.3} | {:.3} |", r.path, r.ms.len(), pct(&r.ms, 50.0), pct(&r.ms, 90.0), pct(&r.ms, 99.0), pct(&r.ms, 100.0));
        }
    });
}
