//! Driver benchmarks for BENCHMARKS.md. Run: `cargo bench --bench driver`
//!
//! Both committed driver components (`components/dist/driver-anthropic.wasm`,
//! `driver-openai.wasm`) are called directly, the way the gateway and the conformance suite call
//! them (`LoadedArtifact::call` with driver grants whose gateway route points at the provider
//! stub over real loopback HTTP). Two measurements:
//!
//! - **Call overhead excluding the provider**, for a 10-message neutral request: the runtime's own
//!   timings (`CallOutcome.instantiate_time + call_time`) with the provider subtracted. The stub
//!   answers a tiny precomputed body; after each driver call a plain client (a fresh TCP
//!   connection + a hand-written HTTP/1.1 request in one write) posts the same provider body to
//!   the same stub for the same answer. Since #16 the driver's requests go over a pooled,
//!   kept-alive connection, so every subtraction (the round trip in A, the plain exchange in B
//!   and C) includes a connection set-up the driver no longer pays: all three now understate
//!   the driver's overhead by about one loopback connect.
//!   Three subtractions are printed: A = that request's `stub_elapsed_ns` + the median loopback
//!   round trip (plain exchange − the stub's time for it); B = the median plain exchange (the
//!   stub's time when the body arrives in one write + the round trip); C = as B but from the
//!   wall time around the whole `call()`. Also a "translate only" call: the same request with no
//!   gateway route, so the policy refuses it before any connection.
//! - **SSE parse + translate throughput inside the component**: a ≈20 MB recorded stream,
//!   generated in memory (text deltas, and tool-input deltas), replayed by the stub as one
//!   body; MB/s = body bytes / (median `call_time` − median time the plain client needs to read
//!   the same body from the same stub over loopback).

use capsule_protocol::manifest::Limits;
use capsule_runtime::{
    ArtifactRole, GatewayRoute, Grants, GuestEvents, Host, HostOptions, LoadedArtifact, OutgoingPolicy, ToolInput,
    ToolStatus, gateway_address,
};
use capsule_stub::{RawResponse, Script, Stub, StubHandle, Turn};
use serde_json::Value;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[path = "driver/bodies.rs"]
mod bodies;

use bodies::*;

const MODEL: &str = "bench-model";
/// Timed calls per driver for the overhead table.
const CALLS: usize = 300;
/// Untimed calls first (page faults, pool slots, connection paths).
const WARMUP: usize = 30;
/// Replays per stream for the throughput table.
const REPLAYS: usize = 5;
/// Target size of each generated stream.
const STREAM_BYTES: usize = 20_000_000;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Nearest-rank percentile of an unsorted sample.
fn pct(v: &[f64], p: f64) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * s.len() as f64).ceil().max(1.0) as usize;
    s[rank - 1]
}

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

/// Counts what the guest reports, cheaply (an atomic add per event).
#[derive(Default)]
struct Counter {
    chunks: AtomicU64,
    chunk_bytes: AtomicU64,
    tool_starts: AtomicU64,
    tool_reports: AtomicU64,
}

impl GuestEvents for Counter {
    fn chunk(&self, text: String) {
        self.chunks.fetch_add(1, Ordering::Relaxed);
        self.chunk_bytes.fetch_add(text.len() as u64, Ordering::Relaxed);
    }
    fn thinking(&self, _: String) {}
    fn tool_call_started(&self, _: String, _: String) {
        self.tool_starts.fetch_add(1, Ordering::Relaxed);
    }
    fn tool_call_input_bytes(&self, _: String, _: u64) {
        self.tool_reports.fetch_add(1, Ordering::Relaxed);
    }
}

/// Driver grants as the gateway builds them, with the route to `endpoint`, keyless.
fn grants(provider: Provider, endpoint: &str) -> Grants {
    Grants {
        role: ArtifactRole::Driver,
        env: vec![
            ("MURMUR_CAPSULE_NAME".into(), "bench".into()),
            ("MURMUR_CAPSULE_VERSION".into(), "0.1.0".into()),
            ("MURMUR_SESSION_ID".into(), "ses_bench".into()),
            ("MURMUR_INFERENCE_ENDPOINT".into(), gateway_address()),
            ("MURMUR_INFERENCE_MODEL".into(), MODEL.into()),
            ("MURMUR_INFERENCE_DRIVER".into(), provider.name().into()),
            ("MURMUR_INFERENCE_TRANSPORT".into(), "http".into()),
        ]
        .into(),
        preopen: None,
        disk: Default::default(),
        limits: Limits { deadline_seconds: 120, ..Limits::default() },
        policy: OutgoingPolicy {
            allow: Vec::new(),
            gateway: Some(GatewayRoute {
                traceparent: None,
                endpoint: endpoint.parse().expect("stub url"),
                fixed: None,
                key: None,
                style: Default::default(),
            }),
            gate: None,
        },
    }
}

/// A plain HTTP/1.1 client: a fresh TCP connection, the request written by hand, the response
/// head parsed for `content-length`, the body read to its end into a reused buffer. Returns the
/// wall time from `connect` to the last body byte, and the body length.
async fn plain_post(addr: SocketAddr, path: &str, headers: &str, body: &[u8], buf: &mut Vec<u8>) -> (Duration, usize) {
    let t0 = Instant::now();
    let mut s = tokio::net::TcpStream::connect(addr).await.expect("connect");
    s.set_nodelay(true).expect("nodelay");
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: {addr}\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\n\r\n",
        body.len()
    );
    let mut req = Vec::with_capacity(head.len() + body.len());
    req.extend_from_slice(head.as_bytes());
    req.extend_from_slice(body);
    s.write_all(&req).await.expect("write");
    buf.clear();
    let mut chunk = vec![0u8; 256 * 1024];
    let (head_end, len) = loop {
        let n = s.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the stub closed before the head");
        buf.extend_from_slice(&chunk[..n]);
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..i]).to_ascii_lowercase();
            assert!(head.starts_with("http/1.1 200"), "{head}");
            let len: usize = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .expect("content-length")
                .trim()
                .parse()
                .expect("number");
            break (i + 4, len);
        }
    };
    while buf.len() < head_end + len {
        let n = s.read(&mut chunk).await.expect("read");
        assert!(n > 0, "the stub closed early");
        buf.extend_from_slice(&chunk[..n]);
    }
    (t0.elapsed(), buf.len() - head_end)
}

/// The headers each driver sends (the plain client sends the same).
fn provider_headers(p: Provider) -> &'static str {
    match p {
        Provider::Anthropic => "anthropic-version: 2023-06-01\r\naccept: text/event-stream\r\n",
        Provider::OpenAi => "accept: text/event-stream\r\n",
    }
}

struct Drivers {
    host: Host,
    anthropic: LoadedArtifact,
    openai: LoadedArtifact,
}

impl Drivers {
    fn get(&self, p: Provider) -> &LoadedArtifact {
        match p {
            Provider::Anthropic => &self.anthropic,
            Provider::OpenAi => &self.openai,
        }
    }
}

struct OverheadRow {
    provider: Provider,
    neutral_bytes: usize,
    provider_bytes: usize,
    instantiate: Vec<f64>,
    call: Vec<f64>,
    /// The stub's time for each driver request.
    stub: Vec<f64>,
    /// The stub's time for each plain-client request.
    plain_stub: Vec<f64>,
    /// The plain client's whole exchange.
    plain: Vec<f64>,
    /// The plain client's exchange minus the stub's time for it.
    rtt: Vec<f64>,
    /// instantiate + call − stub(this request) − median RTT.
    overhead_a: Vec<f64>,
    /// instantiate + call − median plain exchange.
    overhead_b: Vec<f64>,
    /// wall around `call()` − median plain exchange.
    overhead_c: Vec<f64>,
    /// instantiate + call when the policy refuses the request (no provider at all).
    translate_only: Vec<f64>,
    /// As `translate_only`, for a 1-message request.
    translate_one: Vec<f64>,
    /// instantiate + call with no input at all (the driver answers `error` at once).
    floor: Vec<f64>,
}

async fn overhead(d: &Drivers, p: Provider) -> OverheadRow {
    let input = ten_message_request();
    let tiny = tiny_body(p);
    let turns = vec![Turn::raw(RawResponse::body(tiny.clone())); WARMUP + 2 * CALLS];
    let stub: StubHandle = Stub::start(Script::new(turns)).expect("stub");
    let g = grants(p, &stub.url());
    let artifact = d.get(p);
    let counter = Arc::new(Counter::default());
    let events: Arc<dyn GuestEvents> = counter.clone();
    for _ in 0..WARMUP {
        let o =
            artifact.call(&d.host, &g, events.clone(), ToolInput { data: Some(input.clone()), log_path: None }).await;
        let r = o.result.unwrap_or_else(|e| panic!("{} warm-up call failed: {e}; stderr {}", p.name(), o.stderr));
        assert_eq!(r.status, ToolStatus::Passed, "{:?} {:?}", r.summary, r.data);
        let data: Value = serde_json::from_str(r.data.as_deref().expect("data")).expect("json");
        assert_eq!(data["content"][0]["text"], "ok", "{data}");
    }
    // The plain client posts exactly the provider body the driver wrote, to the same path.
    let first = stub.requests().into_iter().next().expect("a request");
    let provider_body = serde_json::to_vec(&first.body).expect("body");
    assert!(
        first.body["messages"].as_array().is_some_and(|m| !m.is_empty()),
        "the stub recorded the translated request"
    );
    let path = first.path.clone();
    let mut buf = Vec::new();
    let (mut instantiate, mut call, mut wall, mut plain) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    for _ in 0..CALLS {
        let t0 = Instant::now();
        let o =
            artifact.call(&d.host, &g, events.clone(), ToolInput { data: Some(input.clone()), log_path: None }).await;
        let w = t0.elapsed();
        assert_eq!(o.result.as_ref().map(|r| r.status).ok(), Some(ToolStatus::Passed));
        instantiate.push(us(o.instantiate_time));
        call.push(us(o.call_time));
        wall.push(us(w));
        let (t, n) = plain_post(stub.addr(), &path, provider_headers(p), &provider_body, &mut buf).await;
        assert_eq!(n, tiny.len());
        plain.push(us(t));
    }
    let reqs = stub.requests();
    assert_eq!(reqs.len(), WARMUP + 2 * CALLS);
    let stub_us = |i: usize| reqs[i].stub_elapsed_ns as f64 / 1e3;
    let stub: Vec<f64> = (0..CALLS).map(|i| stub_us(WARMUP + 2 * i)).collect();
    let plain_stub: Vec<f64> = (0..CALLS).map(|i| stub_us(WARMUP + 2 * i + 1)).collect();
    let rtt: Vec<f64> = (0..CALLS).map(|i| plain[i] - plain_stub[i]).collect();
    let (rtt_med, plain_med) = (pct(&rtt, 50.0), pct(&plain, 50.0));
    let overhead_a = (0..CALLS).map(|i| instantiate[i] + call[i] - stub[i] - rtt_med).collect();
    let overhead_b = (0..CALLS).map(|i| instantiate[i] + call[i] - plain_med).collect();
    let overhead_c = (0..CALLS).map(|i| wall[i] - plain_med).collect();
    // The same call with no gateway route: the policy refuses the driver's request before any
    // connection, so this is instantiate + parse + translate + serialize + the refusal + result.
    let denied = Grants { policy: OutgoingPolicy::default(), ..g.clone() };
    let mut translate_only = Vec::new();
    for i in 0..WARMUP + CALLS {
        let o = artifact
            .call(&d.host, &denied, events.clone(), ToolInput { data: Some(input.clone()), log_path: None })
            .await;
        let r = o.result.expect("a result");
        assert_eq!(r.status, ToolStatus::Failed, "refused: {:?}", r.summary);
        assert!(r.summary.as_deref().unwrap_or("").contains("HttpRequestDenied"), "{:?}", r.summary);
        if i >= WARMUP {
            translate_only.push(us(o.instantiate_time + o.call_time));
        }
    }
    let one = one_message_request();
    let mut translate_one = Vec::new();
    for i in 0..WARMUP + CALLS {
        let o = artifact
            .call(&d.host, &denied, events.clone(), ToolInput { data: Some(one.clone()), log_path: None })
            .await;
        assert_eq!(o.result.expect("a result").status, ToolStatus::Failed);
        if i >= WARMUP {
            translate_one.push(us(o.instantiate_time + o.call_time));
        }
    }
    // The floor of any call: no input, so the driver answers `error` before doing anything.
    let mut floor = Vec::new();
    for i in 0..WARMUP + CALLS {
        let o = artifact.call(&d.host, &denied, events.clone(), ToolInput { data: None, log_path: None }).await;
        assert_eq!(o.result.expect("a result").status, ToolStatus::Error);
        if i >= WARMUP {
            floor.push(us(o.instantiate_time + o.call_time));
        }
    }
    OverheadRow {
        provider: p,
        neutral_bytes: input.len(),
        provider_bytes: provider_body.len(),
        instantiate,
        call,
        stub,
        plain_stub,
        plain,
        rtt,
        overhead_a,
        overhead_b,
        overhead_c,
        translate_only,
        translate_one,
        floor,
    }
}

struct ThroughputRow {
    provider: Provider,
    kind: &'static str,
    bytes: usize,
    events: u64,
    call_ms: f64,
    read_ms: f64,
}

async fn throughput(d: &Drivers, p: Provider, kind: &'static str, dir: &std::path::Path) -> ThroughputRow {
    let (body, expect) = if kind == "text" { text_stream(p) } else { tool_stream(p) };
    let file = dir.join(format!("{}-{kind}.sse", p.name()));
    std::fs::write(&file, &body).expect("write body");
    let bytes = body.len();
    drop(body);
    let input = ten_message_request();
    let artifact = d.get(p);
    let (mut calls, mut reads) = (Vec::new(), Vec::new());
    let mut buf = Vec::with_capacity(bytes + 4096);
    for _ in 0..REPLAYS {
        // A fresh stub per replay holds only this replay's two copies of the body.
        let stub =
            Stub::start(Script::new(vec![Turn::raw(RawResponse::file(&file)), Turn::raw(RawResponse::file(&file))]))
                .expect("stub");
        let counter = Arc::new(Counter::default());
        let o = artifact
            .call(
                &d.host,
                &grants(p, &stub.url()),
                counter.clone(),
                ToolInput { data: Some(input.clone()), log_path: None },
            )
            .await;
        let r = o.result.unwrap_or_else(|e| panic!("{} {kind} call failed: {e}; stderr {}", p.name(), o.stderr));
        assert_eq!(r.status, ToolStatus::Passed, "{:?}", r.summary);
        let data: Value = serde_json::from_str(r.data.as_deref().expect("data")).expect("json");
        assert_eq!(
            counter.chunks.load(Ordering::Relaxed),
            expect.chunks,
            "{} {kind}: one chunk event per text delta",
            p.name()
        );
        assert_eq!(counter.chunk_bytes.load(Ordering::Relaxed), expect.text_bytes);
        assert_eq!(
            counter.tool_reports.load(Ordering::Relaxed),
            expect.tool_reports,
            "{} {kind}: one report per input delta",
            p.name()
        );
        assert_eq!(counter.tool_starts.load(Ordering::Relaxed), u64::from(expect.tool_input.is_some()));
        match &expect.tool_input {
            Some(input) => {
                let call = data["content"]
                    .as_array()
                    .and_then(|c| c.iter().find(|b| b["type"] == "tool_call"))
                    .expect("a tool call");
                assert!(call["input"] == *input, "{} {kind}: the input round-trips", p.name());
            }
            None => assert_eq!(data["content"][0]["text"].as_str().map(str::len), Some(expect.text_bytes as usize)),
        }
        calls.push(o.call_time.as_secs_f64() * 1e3);
        let first = stub.requests().into_iter().next().expect("request");
        let provider_body = serde_json::to_vec(&first.body).expect("body");
        let (t, n) = plain_post(stub.addr(), &first.path, provider_headers(p), &provider_body, &mut buf).await;
        assert_eq!(n, bytes);
        reads.push(t.as_secs_f64() * 1e3);
    }
    let events = expect.chunks + expect.tool_reports;
    ThroughputRow { provider: p, kind, bytes, events, call_ms: pct(&calls, 50.0), read_ms: pct(&reads, 50.0) }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    println!("# Driver benchmarks ({} cores)", std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1));
    rt.block_on(async {
        let host = Host::new(HostOptions { cache_dir: Some(repo().join("target/bench-component-cache")) }).expect("host");
        let load = |name: &str| LoadedArtifact::load_file(&host, name, &repo().join(format!("components/dist/driver-{name}.wasm"))).expect("driver loads");
        let d = Drivers { anthropic: load("anthropic"), openai: load("openai"), host: host.clone() };

        let rows = vec![overhead(&d, Provider::Anthropic).await, overhead(&d, Provider::OpenAi).await];
        println!("\n## Driver call overhead excluding the provider (10-message request, {CALLS} calls per driver after {WARMUP} warm-up)\n");
        println!("Each call: `LoadedArtifact::call` on the committed component with a 10-message neutral request (system prompt, 2 tools); the stub answers a tiny precomputed SSE body (one text delta), sent whole. After each driver call a plain client (fresh TCP connection, hand-written HTTP/1.1, one write) posts the same provider body to the same stub for the same answer. All figures µs, p50 over {CALLS}.\n");
        println!("| driver | neutral bytes | provider body bytes | instantiate | call | stub time, driver's request | stub time, plain request | plain exchange | loopback RTT (plain − its stub time) | translate only (request refused by policy) | same, 1-message request | floor: no input (instantiate + an immediate `error`) |");
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
        for r in &rows {
            println!(
                "| {} | {} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                r.provider.name(),
                r.neutral_bytes,
                r.provider_bytes,
                pct(&r.instantiate, 50.0),
                pct(&r.call, 50.0),
                pct(&r.stub, 50.0),
                pct(&r.plain_stub, 50.0),
                pct(&r.plain, 50.0),
                pct(&r.rtt, 50.0),
                pct(&r.translate_only, 50.0),
                pct(&r.translate_one, 50.0),
                pct(&r.floor, 50.0),
            );
        }
        println!("\nOverhead, three ways of subtracting the provider:\n");
        println!("- A = `instantiate_time` + `call_time` − that request's `stub_elapsed_ns` − median loopback RTT;");
        println!("- B = `instantiate_time` + `call_time` − median plain exchange (the stub's time when the body arrives in one write + the RTT);");
        println!("- C = wall time around the whole `call()` (adds WASI context + `Store` creation) − median plain exchange.\n");
        println!("| driver | A p50 µs | A p90 µs | B p50 µs | B p90 µs | C p50 µs | C p90 µs |");
        println!("|---|---|---|---|---|---|---|");
        for r in &rows {
            println!(
                "| {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
                r.provider.name(),
                pct(&r.overhead_a, 50.0),
                pct(&r.overhead_a, 90.0),
                pct(&r.overhead_b, 50.0),
                pct(&r.overhead_b, 90.0),
                pct(&r.overhead_c, 50.0),
                pct(&r.overhead_c, 90.0),
            );
        }

        let dir = tempfile::tempdir().expect("tempdir");
        let mut t = Vec::new();
        for p in [Provider::Anthropic, Provider::OpenAi] {
            for kind in ["text", "tool-input"] {
                t.push(throughput(&d, p, kind, dir.path()).await);
            }
        }
        println!("\n## SSE parse + translate throughput inside the component (median of {REPLAYS} replays each)\n");
        println!("A generated stream replayed by the stub as one body through the real component (events go to a counting sink). MB/s = body bytes / (median `call_time` − median time a plain client needs to POST the same request and read the same body from the same stub over loopback); \"raw MB/s\" divides by `call_time` alone. text = text deltas of 20–30 bytes; tool-input = one tool call's input in 16-byte deltas (Anthropic `input_json_delta`, OpenAI `function.arguments`).\n");
        println!("| driver | stream | body MB | events | call ms | plain read ms | MB/s | raw MB/s | events/s (M) |");
        println!("|---|---|---|---|---|---|---|---|---|");
        for r in &t {
            let net = r.call_ms - r.read_ms;
            println!(
                "| {} | {} | {:.1} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.2} |",
                r.provider.name(),
                r.kind,
                r.bytes as f64 / 1e6,
                r.events,
                r.call_ms,
                r.read_ms,
                r.bytes as f64 / 1e6 / (net / 1e3),
                r.bytes as f64 / 1e6 / (r.call_ms / 1e3),
                r.events as f64 / 1e6 / (net / 1e3),
            );
        }
    });
}
