//! Frame latency from the stub (or an emitter cast) to a reader of the door.

use super::*;

/// 8-character pieces that say their own number, so a frame is matched to its delta by text.
pub(crate) fn latency_pieces() -> Vec<String> {
    (0..LATENCY_DELTAS).map(|j| format!("{j:07}|")).collect()
}

pub(crate) fn latency_stub() -> StubHandle {
    let text: String = latency_pieces().concat();
    let mut script =
        Script::new(vec![Turn { text: Some(text), event_interval_ms: Some(LATENCY_INTERVAL_MS), ..Turn::default() }]);
    script.chunk_chars = 8;
    Stub::start(script).expect("stub")
}

/// The stub's hand-over instant of each text delta: the Anthropic stream is message_start, ping,
/// content_block_start, the deltas, content_block_stop, message_delta, message_stop.
pub(crate) fn delta_sent(stub: &StubHandle) -> Vec<u128> {
    let sent = stub.requests().into_iter().next().expect("a request").event_sent_unix_ns;
    assert_eq!(sent.len(), LATENCY_DELTAS + 6, "one instant per SSE event");
    sent[3..3 + LATENCY_DELTAS].to_vec()
}

pub(crate) struct LatencyRow {
    pub(crate) path: &'static str,
    pub(crate) watchers: usize,
    pub(crate) ms: Vec<f64>,
}

pub(crate) type Arrivals = Arc<Mutex<Vec<(u128, String)>>>;

/// Full path: stub → driver → sink → emitter → door → reqwest, with `watchers` readers.
pub(crate) async fn latency_full(host: &Host, watchers: usize) -> LatencyRow {
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
pub(crate) struct ChunkTimes(Mutex<Vec<(u128, String)>>);

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
pub(crate) async fn latency_driver(host: &Host) -> LatencyRow {
    let stub = latency_stub();
    let artifact = LoadedArtifact::load_file(host, "anthropic", &repo().join("components/dist/driver-anthropic.wasm"))
        .expect("driver");
    let grants = Grants {
        role: ArtifactRole::Driver,
        env: vec![
            ("MURMUR_INFERENCE_ENDPOINT".into(), gateway_address()),
            ("MURMUR_INFERENCE_MODEL".into(), "claude-bench".into()),
        ]
        .into(),
        preopen: None,
        disk: Default::default(),
        limits: Limits { deadline_seconds: 60, ..Limits::default() },
        policy: OutgoingPolicy {
            allow: Vec::new(),
            gateway: Some(GatewayRoute {
                traceparent: None,
                endpoint: stub.url().parse().expect("url"),
                fixed: None,
                key: None,
                style: Default::default(),
            }),
            gate: None,
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
pub(crate) async fn latency_emitter(host: &Host, watchers: usize) -> LatencyRow {
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
