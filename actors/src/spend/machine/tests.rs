//! Tests of the machine meter and its ledger: restarts, a torn last line, duplicates, the UTC
//! day boundary (with an injected clock; no sleeps).

use super::*;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

const DAY_MS: u64 = 86_400_000;
/// 2024-01-01T00:00:00Z in ms.
const JAN_1: u64 = 19_723 * DAY_MS;

fn clock_at(ms: &Arc<AtomicU64>) -> Clock {
    let ms = ms.clone();
    Arc::new(move || UNIX_EPOCH + Duration::from_millis(ms.load(Ordering::SeqCst)))
}

async fn start(dir: &std::path::Path, ceiling: Option<u64>, clock: Clock) -> ActorRef<MachineMsg> {
    let args = MachineArgs { dir: dir.to_path_buf(), tokens_per_day: ceiling, clock, cluster: None };
    Actor::spawn(None, MachineMeter, args).await.expect("spawn machine meter").0
}

async fn reserve(m: &ActorRef<MachineMsg>, session: &str, id: u64, tokens: u64) -> Result<(), Refusal> {
    m.call(|reply| MachineMsg::Reserve { session: Arc::from(session), id, tokens, reply }, None)
        .await
        .expect("reserve")
        .expect("answered")
}

/// Settle and wait for the durable acknowledgement.
async fn settle(m: &ActorRef<MachineMsg>, session: &str, id: u64, input: u64, output: u64) -> bool {
    m.call(|ack| MachineMsg::Settle { session: Arc::from(session), id, input, output, ack: Some(ack) }, None)
        .await
        .expect("settle")
        .expect("answered")
}

async fn totals(m: &ActorRef<MachineMsg>) -> MachineTotals {
    m.call(MachineMsg::Totals, None).await.expect("totals").expect("answered")
}

/// The settlement lines of a ledger file (reservation and release lines have a `kind`).
fn lines(path: &std::path::Path) -> Vec<LedgerLine> {
    std::fs::read_to_string(path)
        .expect("ledger file")
        .lines()
        .filter(|l| !l.contains("\"kind\""))
        .map(|l| serde_json::from_str(l).expect("a ledger line"))
        .collect()
}

#[tokio::test]
async fn a_settlement_is_on_disk_when_acknowledged_and_survives_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let now = Arc::new(AtomicU64::new(JAN_1 + 1_000));
    let m = start(dir.path(), Some(1000), clock_at(&now)).await;
    reserve(&m, "ses_a", 1, 300).await.expect("fits");
    assert!(settle(&m, "ses_a", 1, 200, 50).await, "durable");
    let file = dir.path().join("spend-2024-01-01.jsonl");
    assert_eq!(
        lines(&file),
        vec![LedgerLine {
            reservation: 1,
            session: "ses_a".into(),
            tokens: 250,
            input: 200,
            output: 50,
            ts: JAN_1 + 1_000,
            abandoned: false
        }]
    );
    m.stop_and_wait(None, None).await.expect("stop");
    let again = start(dir.path(), Some(1000), clock_at(&now)).await;
    let t = totals(&again).await;
    assert_eq!((t.day.as_str(), t.settled, t.reserved, t.settlements), ("2024-01-01", 250, 0, 1));
    assert_eq!(t.recovered, Recovery { day: "2024-01-01".into(), lines: 1, tokens: 250, ..Default::default() });
    assert_eq!(reserve(&again, "ses_b", 1, 751).await.expect_err("250 + 751 > 1000").used, 250);
}

#[tokio::test]
async fn a_torn_last_line_is_ignored_reported_cut_off_and_never_counted_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let now = Arc::new(AtomicU64::new(JAN_1 + 5));
    let m = start(dir.path(), None, clock_at(&now)).await;
    for id in 1..=2 {
        reserve(&m, "ses_a", id, 100).await.expect("no ceiling");
        assert!(settle(&m, "ses_a", id, 100, 0).await);
    }
    m.stop_and_wait(None, None).await.expect("stop");
    // A kill mid-write: the third line got only part of the way to disk.
    let file = dir.path().join("spend-2024-01-01.jsonl");
    let mut f = std::fs::OpenOptions::new().append(true).open(&file).expect("open");
    let torn = br#"{"reservation":3,"session":"ses_a","tokens":1"#;
    f.write_all(torn).expect("torn write");
    drop(f);

    let m = start(dir.path(), None, clock_at(&now)).await;
    let t = totals(&m).await;
    assert_eq!((t.settled, t.settlements, t.recovered.lines), (200, 2, 2));
    assert_eq!(t.recovered.torn_bytes, torn.len() as u64, "reported");
    assert_eq!(lines(&file).len(), 2, "cut off");
    reserve(&m, "ses_a", 3, 100).await.expect("no ceiling");
    assert!(settle(&m, "ses_a", 3, 40, 2).await);
    m.stop_and_wait(None, None).await.expect("stop");

    let m = start(dir.path(), None, clock_at(&now)).await;
    let t = totals(&m).await;
    assert_eq!((t.settled, t.settlements), (242, 3));
    assert_eq!((t.recovered.torn_bytes, t.recovered.corrupt, t.recovered.duplicates), (0, 0, 0));
    assert_eq!(lines(&file).iter().map(|l| l.tokens).collect::<Vec<_>>(), vec![100, 100, 42]);
}

#[tokio::test]
async fn a_repeated_line_is_counted_once_and_a_repeated_settle_is_not_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let now = Arc::new(AtomicU64::new(JAN_1));
    let file = dir.path().join("spend-2024-01-01.jsonl");
    let line = r#"{"reservation":9,"session":"ses_z","tokens":70,"input":70,"output":0,"ts":1}"#;
    std::fs::write(&file, format!("{line}\n{line}\nnot json\n")).expect("seed ledger");
    let m = start(dir.path(), None, clock_at(&now)).await;
    let t = totals(&m).await;
    assert_eq!((t.settled, t.recovered.duplicates, t.recovered.corrupt), (70, 1, 1));
    assert!(settle(&m, "ses_z", 9, 70, 0).await, "acknowledged");
    assert_eq!(totals(&m).await.settled, 70, "not counted again");
    assert_eq!(std::fs::read_to_string(&file).expect("read").lines().count(), 3, "not written again");
}

#[tokio::test]
async fn the_day_rolls_over_at_utc_midnight() {
    let dir = tempfile::tempdir().expect("tempdir");
    let now = Arc::new(AtomicU64::new(JAN_1 + DAY_MS - 1)); // 2024-01-01T23:59:59.999Z
    let m = start(dir.path(), Some(1000), clock_at(&now)).await;
    reserve(&m, "ses_a", 1, 600).await.expect("fits");
    assert!(settle(&m, "ses_a", 1, 600, 0).await);
    reserve(&m, "ses_a", 2, 300).await.expect("open across midnight");
    assert_eq!(reserve(&m, "ses_b", 1, 101).await.expect_err("full on Jan 1").used, 900);

    now.store(JAN_1 + DAY_MS, Ordering::SeqCst); // 2024-01-02T00:00:00.000Z
    let t = totals(&m).await;
    assert_eq!((t.day.as_str(), t.settled, t.reserved), ("2024-01-02", 0, 300));
    reserve(&m, "ses_b", 1, 700).await.expect("a new day: 300 still reserved + 700 fits");
    assert_eq!(reserve(&m, "ses_b", 2, 1).await.expect_err("full on Jan 2").ceiling, 1000);
    assert!(settle(&m, "ses_a", 2, 250, 0).await, "settles on the day it ends");
    assert!(settle(&m, "ses_b", 1, 700, 0).await);

    let day1 = lines(&dir.path().join("spend-2024-01-01.jsonl"));
    let day2 = lines(&dir.path().join("spend-2024-01-02.jsonl"));
    assert_eq!(day1.iter().map(|l| l.tokens).sum::<u64>(), 600);
    assert_eq!(day2.iter().map(|l| l.tokens).sum::<u64>(), 950);
    m.stop_and_wait(None, None).await.expect("stop");
    let again = start(dir.path(), Some(1000), clock_at(&now)).await;
    assert_eq!(totals(&again).await.settled, 950, "only today's file counts");
}

#[tokio::test]
async fn an_abandoned_session_is_charged_its_open_reservations_in_full() {
    let dir = tempfile::tempdir().expect("tempdir");
    let now = Arc::new(AtomicU64::new(JAN_1));
    let m = start(dir.path(), Some(1000), clock_at(&now)).await;
    reserve(&m, "ses_a", 1, 300).await.expect("fits");
    reserve(&m, "ses_b", 1, 200).await.expect("fits");
    m.cast(MachineMsg::Abandon { session: Arc::from("ses_a") }).expect("abandon");
    m.cast(MachineMsg::Release { session: Arc::from("ses_b"), id: 1 }).expect("release");
    let t = totals(&m).await;
    assert_eq!((t.settled, t.reserved, t.open), (300, 0, 0));
    let health = m.call(MachineMsg::Flush, None).await.expect("flush").expect("answered");
    assert_eq!(health, LedgerHealth { written: 1, failed: 0 });
    assert!(lines(&dir.path().join("spend-2024-01-01.jsonl"))[0].abandoned);
}
