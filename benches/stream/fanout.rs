//! Emitter fan-out to many `stream/watch` readers on loopback.

use super::*;

#[derive(Default)]
pub(crate) struct Reader {
    pub(crate) window: AtomicU64,
    pub(crate) burst: AtomicU64,
    pub(crate) sentinels: AtomicU64,
    pub(crate) missed: AtomicU64,
}

pub(crate) struct FanoutRow {
    pub(crate) mode: &'static str,
    pub(crate) emitted: u64,
    pub(crate) delivered: u64,
    pub(crate) lost: u64,
    pub(crate) lagged_missed: u64,
    pub(crate) secs: f64,
}

pub(crate) fn text_frame(text: String) -> EmitterMsg {
    EmitterMsg::Emit(Frame::Text { id: "tsk_bench".into(), text, is_final: false })
}

pub(crate) async fn fanout(host: &Host) -> Vec<FanoutRow> {
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
