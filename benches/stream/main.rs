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

mod a2a;
mod coalescer;
mod fanout;
mod latency;

use fanout::*;
use latency::*;

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
            cluster: None,
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
async fn watch<F>(client: &reqwest::Client, url: &str, on_frame: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut(&str, &str, u128) -> bool + Send + 'static,
{
    sse(client, url, r#"{"jsonrpc":"2.0","id":1,"method":"stream/watch"}"#.to_string(), on_frame).await
}

/// POSTs `body` to `url` and reads its SSE answer as [`watch`] does.
async fn sse<F>(client: &reqwest::Client, url: &str, body: String, mut on_frame: F) -> tokio::task::JoinHandle<()>
where
    F: FnMut(&str, &str, u128) -> bool + Send + 'static,
{
    let resp = client.post(url).header("content-type", "application/json").body(body).send().await.expect("stream");
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
        coalescer::coalescer().await;

        let host = host();
        let rows = fanout::fanout(&host).await;
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

        let rows = a2a::compare(&host, 3).await;
        println!("\n## A2A stream against the Murmur door (same task frames, one run)\n");
        println!("One session per path and round, its task held `working` by a stub that answers after a minute; `text` frames with the task's id cast to the emitter; one reqwest reader per path parsing every SSE event as JSON. Throughput: 20000 frames, at most {WINDOW} in flight, median of 3 rounds (the paths alternate). Latency: {LATENCY_DELTAS} frames one every {LATENCY_INTERVAL_MS} ms, cast instant → read, all rounds pooled.\n");
        println!("| path | frames/s (k) | p50 ms | p90 ms | p99 ms |");
        println!("|---|---|---|---|---|");
        for r in &rows {
            println!("| {} | {:.1} | {:.3} | {:.3} | {:.3} |", r.path, r.frames_per_s / 1e3, pct(&r.ms, 50.0), pct(&r.ms, 90.0), pct(&r.ms, 99.0));
        }
        let (door, a2a) = (&rows[0], &rows[1]);
        println!("\nA2A / door: throughput {:.3}, p50 latency {:.3} (target: throughput ≥ 0.9, latency ≤ 1.1)", a2a.frames_per_s / door.frames_per_s, pct(&a2a.ms, 50.0) / pct(&door.ms, 50.0));
    });
}
