//! The A2A stream (`POST /a2a`, `SendStreamingMessage`) against the Murmur door's
//! (`POST /`, `message/stream`) for the same task's text frames, in one run.
//!
//! Each path gets its own session whose task waits on a stub that answers only after a minute,
//! so the task stays `working` while the bench casts `text` frames with its id straight to the
//! session's emitter (what the driver sink's `chunk` does). One reader per path parses each
//! SSE event as JSON and takes the text out: for the door a frame's `text`, for A2A the
//! artifact update's text part. Throughput: [`FRAMES`] frames with at most [`WINDOW`] in
//! flight (lossless), from the first cast until the reader has the last. Latency: each frame's
//! text carries its cast instant; [`LATENCY_DELTAS`] frames one every
//! [`LATENCY_INTERVAL_MS`] ms.

use super::*;

/// Frames per throughput run.
const FRAMES: u64 = 20_000;

pub(crate) struct A2aRow {
    pub path: &'static str,
    pub frames_per_s: f64,
    pub ms: Vec<f64>,
}

#[derive(Clone, Copy, PartialEq)]
enum Path {
    Door,
    A2a,
}

impl Path {
    fn label(self) -> &'static str {
        match self {
            Path::Door => "Murmur door `message/stream`",
            Path::A2a => "A2A `SendStreamingMessage` (v1.0)",
        }
    }

    fn request(self, base: &str) -> (String, String) {
        match self {
            Path::Door => (
                base.to_string(),
                r#"{"jsonrpc":"2.0","id":1,"method":"message/stream","params":{"message":{"role":"user","parts":[{"text":"wait"}]}}}"#.into(),
            ),
            Path::A2a => (
                format!("{base}/a2a"),
                r#"{"jsonrpc":"2.0","id":1,"method":"SendStreamingMessage","params":{"message":{"role":"ROLE_USER","parts":[{"text":"wait"}]}}}"#.into(),
            ),
        }
    }

    /// The task id, when this event names the task first (door: the `working` status; A2A: the
    /// task).
    fn task_id(self, event: &str, v: &serde_json::Value) -> Option<String> {
        match self {
            Path::Door if event == "status" => v["id"].as_str().map(String::from),
            Path::A2a => v["result"]["task"]["id"].as_str().map(String::from),
            _ => None,
        }
    }

    /// A text chunk's text.
    fn text<'a>(self, event: &str, v: &'a serde_json::Value) -> Option<&'a str> {
        match self {
            Path::Door if event == "text" => v["text"].as_str(),
            Path::A2a => v["result"]["artifactUpdate"]["artifact"]["parts"][0]["text"].as_str(),
            _ => None,
        }
    }
}

struct Counts {
    got: AtomicU64,
    ms: Mutex<Vec<f64>>,
    notify: Notify,
}

async fn run(host: &Host, path: Path) -> A2aRow {
    let stub = Stub::start(Script::new(vec![Turn { delay_ms: Some(60_000), ..Turn::text("late") }])).expect("stub");
    let served = Served::start(&stub, host).await;
    let emitter = served.emitter();
    let client = reqwest::Client::new();
    let counts = Arc::new(Counts { got: AtomicU64::new(0), ms: Mutex::new(Vec::new()), notify: Notify::new() });
    let (id_tx, id_rx) = tokio::sync::oneshot::channel::<String>();
    let mut id_tx = Some(id_tx);
    let c2 = counts.clone();
    let (url, body) = path.request(&served.door.url());
    let reader = sse(&client, &url, body, move |event, data, at| {
        let v: serde_json::Value = serde_json::from_str(data).expect("JSON data");
        if let Some(id) = path.task_id(event, &v)
            && let Some(tx) = id_tx.take()
        {
            let _ = tx.send(id);
        }
        if let Some(text) = path.text(event, &v) {
            if text == "END" {
                return false;
            }
            if let Some(sent) = text.strip_prefix('L').and_then(|t| t.parse::<u128>().ok()) {
                c2.ms.lock().expect("ms").push((at as f64 - sent as f64) / 1e6);
            }
            c2.got.fetch_add(1, Ordering::Relaxed);
            c2.notify.notify_one();
        }
        true
    })
    .await;
    let task = tokio::time::timeout(Duration::from_secs(30), id_rx).await.expect("the task starts").expect("id");
    let frame = |text: String| EmitterMsg::Emit(Frame::Text { id: task.clone(), text, is_final: false });

    let t0 = Instant::now();
    for i in 0..FRAMES {
        while i - counts.got.load(Ordering::Relaxed) >= WINDOW {
            counts.notify.notified().await;
        }
        emitter.cast(frame(format!("t{i:039}"))).expect("emit");
    }
    while counts.got.load(Ordering::Relaxed) < FRAMES {
        counts.notify.notified().await;
    }
    let secs = t0.elapsed().as_secs_f64();

    for _ in 0..LATENCY_DELTAS {
        emitter.cast(frame(format!("L{}", now_ns()))).expect("emit");
        tokio::time::sleep(Duration::from_millis(LATENCY_INTERVAL_MS)).await;
    }
    emitter.cast(frame("END".into())).expect("emit");
    tokio::time::timeout(Duration::from_secs(30), reader).await.expect("the reader ends").expect("reader");
    let ms = std::mem::take(&mut *counts.ms.lock().expect("ms"));
    assert_eq!(ms.len(), LATENCY_DELTAS, "no frame lost at this pace");
    let _ = served.session.cancel(&task).await;
    served.stop().await;
    stub.shutdown();
    A2aRow { path: path.label(), frames_per_s: FRAMES as f64 / secs, ms }
}

/// Both paths, alternated over `rounds` rounds so drift on a noisy machine hits both alike.
pub(crate) async fn compare(host: &Host, rounds: usize) -> Vec<A2aRow> {
    let mut door = Vec::new();
    let mut a2a = Vec::new();
    for _ in 0..rounds {
        door.push(run(host, Path::Door).await);
        a2a.push(run(host, Path::A2a).await);
    }
    [door, a2a]
        .into_iter()
        .map(|rows| {
            let rates: Vec<f64> = rows.iter().map(|r| r.frames_per_s).collect();
            A2aRow {
                path: rows[0].path,
                frames_per_s: pct(&rates, 50.0),
                ms: rows.iter().flat_map(|r| r.ms.iter().copied()).collect(),
            }
        })
        .collect()
}
