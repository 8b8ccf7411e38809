//! Tests of the session meter with and without a machine meter (no sleeps; unnamed actors).

use super::*;
use crate::spend::machine::{MachineArgs, MachineMeter, MachineTotals};

type Admitted = Result<Reservation, Refusal>;

async fn meter(ceiling: Option<u64>, machine: Option<ActorRef<MachineMsg>>) -> ActorRef<SpendMsg> {
    meter_with(SpendArgs::new(format!("ses_{}", uuid::Uuid::now_v7().simple()), ceiling, machine)).await
}

async fn meter_with(args: SpendArgs) -> ActorRef<SpendMsg> {
    Actor::spawn(None, SpendMeter, args).await.expect("spawn spend meter").0
}

async fn machine(dir: &std::path::Path, ceiling: Option<u64>) -> ActorRef<MachineMsg> {
    Actor::spawn(None, MachineMeter, MachineArgs::new(dir, ceiling)).await.expect("spawn machine meter").0
}

async fn admit(m: &ActorRef<SpendMsg>, estimated_input: u64, max_output: u64) -> Admitted {
    m.call(|reply| SpendMsg::Admit { estimated_input, max_output, reply }, None)
        .await
        .expect("admit")
        .expect("answered")
}

async fn totals(m: &ActorRef<SpendMsg>) -> SpendTotals {
    m.call(SpendMsg::Totals, None).await.expect("totals").expect("answered")
}

async fn machine_totals(m: &ActorRef<MachineMsg>) -> MachineTotals {
    m.call(MachineMsg::Totals, None).await.expect("totals").expect("answered")
}

fn settle(m: &ActorRef<SpendMsg>, r: &Reservation, input: u64, output: u64) {
    m.cast(SpendMsg::Settle { reservation: r.id, input, output, actual: None }).expect("settle");
}

/// Sum of the tokens of every line in the ledger folder, after a flush.
async fn ledger_total(m: &ActorRef<MachineMsg>, dir: &std::path::Path) -> u64 {
    let health = m.call(MachineMsg::Flush, None).await.expect("flush").expect("answered");
    assert_eq!(health.failed, 0);
    let mut sum = 0;
    for entry in std::fs::read_dir(dir).expect("ledger dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_none_or(|e| e != "jsonl") {
            continue;
        }
        let text = std::fs::read_to_string(path).expect("read ledger");
        // Settlements only: reservation and release lines carry a `kind`.
        for line in text.lines().filter(|l| !l.contains("\"kind\"")) {
            sum += serde_json::from_str::<crate::spend::machine::LedgerLine>(line).expect("a ledger line").tokens;
        }
    }
    sum
}

#[tokio::test]
async fn the_last_call_that_fits_the_session_ceiling_passes_and_the_next_is_refused() {
    let m = meter(Some(1000), None).await;
    let a = admit(&m, 400, 100).await.expect("first call fits");
    let b = admit(&m, 400, 100).await.expect("settled + reserved + request = ceiling fits");
    let refused = admit(&m, 0, 1).await.expect_err("one token more is refused");
    assert_eq!(refused, Refusal { limit: Limit::Session, ceiling: 1000, used: 1000, requested: 1 });
    assert_eq!(refused.code(), "E-RUN-080");
    let text = refused.to_string();
    assert!(
        text.starts_with("E-RUN-080") && text.contains("inference.max_session_tokens") && text.contains("raise"),
        "{text}"
    );
    assert_eq!(
        refused.trace_fields(),
        serde_json::json!({"limit": "session", "ceiling": 1000, "used": 1000, "requested": 1, "code": "E-RUN-080"})
    );
    settle(&m, &a, 400, 100);
    settle(&m, &b, 400, 100);
    let t = totals(&m).await;
    assert_eq!((t.settled, t.reserved, t.open, t.admitted, t.refused), (1000, 0, 0, 2, 1));
}

#[tokio::test]
async fn the_last_call_that_fits_the_machine_ceiling_passes_the_next_is_refused_and_it_does_not_latch() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = machine(dir.path(), Some(1000)).await;
    let (s1, s2) = (meter(None, Some(host.clone())).await, meter(None, Some(host.clone())).await);
    let a = admit(&s1, 600, 0).await.expect("fits");
    admit(&s2, 300, 100).await.expect("exactly the ceiling fits");
    let refused = admit(&s1, 0, 1).await.expect_err("over the host ceiling");
    assert_eq!(refused, Refusal { limit: Limit::Machine, ceiling: 1000, used: 1000, requested: 1 });
    assert!(
        refused.to_string().starts_with("E-RUN-081") && refused.to_string().contains("spend.machine_tokens_per_day")
    );
    settle(&s1, &a, 500, 0);
    admit(&s1, 100, 0).await.expect("re-checked: the 100 freed by the settle fit");
    assert_eq!(admit(&s2, 1, 0).await.expect_err("full again").limit, Limit::Machine);
    assert_eq!(totals(&s1).await.latched, None);
    let mt = machine_totals(&host).await;
    assert_eq!((mt.settled, mt.reserved, mt.open, mt.refusals), (500, 500, 2, 2));
}

#[tokio::test]
async fn a_session_refusal_latches_and_the_session_stays_up() {
    let m = meter(Some(1000), None).await;
    let a = admit(&m, 600, 300).await.expect("fits");
    let first = admit(&m, 100, 50).await.expect_err("would pass the ceiling");
    m.cast(SpendMsg::Fail { reservation: a.id, actual: None }).expect("fail");
    let later = admit(&m, 10, 10).await.expect_err("latched although 20 tokens would fit now");
    assert_eq!(later, Refusal { limit: Limit::Session, ceiling: 1000, used: 600, requested: 20 });
    let t = totals(&m).await;
    assert_eq!(t.latched, Some(first));
    assert_eq!((t.settled, t.refused), (600, 2));
}

#[tokio::test]
async fn a_failed_call_is_charged_its_input_only() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = machine(dir.path(), Some(10_000)).await;
    let m = meter(Some(5_000), Some(host.clone())).await;
    let r = admit(&m, 700, 300).await.expect("fits");
    m.cast(SpendMsg::Fail { reservation: r.id, actual: None }).expect("fail");
    let t = totals(&m).await;
    assert_eq!((t.settled, t.reserved, t.calls, t.estimated_input), (700, 0, 1, 700));
    let mt = machine_totals(&host).await;
    assert_eq!((mt.settled, mt.reserved), (700, 0));
    assert_eq!(ledger_total(&host, dir.path()).await, 700);
}

#[tokio::test]
async fn a_settle_is_capped_at_its_reservation_and_the_excess_is_reported_and_settling_twice_counts_once() {
    let m = meter(None, None).await;
    let r = admit(&m, 100, 50).await.expect("no ceiling");
    settle(&m, &r, 120, 60);
    settle(&m, &r, 120, 60);
    let t = totals(&m).await;
    assert_eq!((t.settled, t.overrun, t.calls), (150, 30, 1));
}

#[tokio::test]
async fn an_unreachable_machine_meter_refuses_the_call() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = machine(dir.path(), Some(1000)).await;
    let m = meter(None, Some(host.clone())).await;
    host.stop_and_wait(None, None).await.expect("stop the machine meter");
    let refused = admit(&m, 1, 1).await.expect_err("fail closed");
    assert_eq!(refused.limit, Limit::MachineUnavailable);
    assert_eq!(refused.code(), "E-RUN-081");
}

#[tokio::test]
async fn a_restarted_session_meter_keeps_its_spend_and_charges_open_calls_in_full() {
    let dir = tempfile::tempdir().expect("tempdir");
    let host = machine(dir.path(), Some(1000)).await;
    let args = SpendArgs::new("ses_restart", Some(400), Some(host.clone()));
    let m = meter_with(args.clone()).await;
    admit(&m, 100, 50).await.expect("fits");
    m.stop_and_wait(None, None).await.expect("stop");
    let again = meter_with(args).await;
    let t = totals(&again).await;
    assert_eq!((t.settled, t.reserved, t.open), (150, 0, 0));
    assert_eq!(machine_totals(&host).await.settled, 150);
    let r = admit(&again, 200, 50).await.expect("ids go on after a restart");
    assert_eq!(r.id, 2);
    assert_eq!(admit(&again, 1, 0).await.expect_err("150 + 250 = 400").limit, Limit::Session);
}

/// A small xorshift64 generator (fixed seed: the same operations every run).
struct XorShift(u64);

impl XorShift {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// 50 capsules' meters share one machine meter. Rounds of random operations (admit, settle with
/// measured totals up to 120% of the estimate, fail) run concurrently on a multi-thread runtime;
/// whatever the interleaving, the host never has more than its ceiling settled + reserved, no
/// session passes its own ceiling, and the sum of settled equals the ledger.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_sessions_sharing_the_machine_ceiling_never_overshoot_it() {
    const CEILING: u64 = 400_000;
    let dir = tempfile::tempdir().expect("tempdir");
    let host = machine(dir.path(), Some(CEILING)).await;
    let mut sessions = Vec::new();
    for i in 0..50 {
        sessions.push(meter(if i % 5 == 0 { Some(3_000) } else { None }, Some(host.clone())).await);
    }
    let mut rng = XorShift(0x2545_f491_4f6c_dd1d);
    let mut open: Vec<(usize, Reservation)> = Vec::new();
    let (mut granted, mut refused) = (0u64, 0u64);
    for _round in 0..600 {
        let mut admits = Vec::new();
        for _ in 0..=rng.below(24) {
            if !open.is_empty() && rng.below(2) == 0 {
                let (s, r) = open.swap_remove(rng.below(open.len() as u64) as usize);
                if rng.below(5) == 0 {
                    sessions[s].cast(SpendMsg::Fail { reservation: r.id, actual: None }).expect("fail");
                } else {
                    settle(&sessions[s], &r, rng.below(r.estimated_input * 6 / 5 + 1), rng.below(r.max_output + 1));
                }
            } else {
                let s = rng.below(50) as usize;
                let (est, out) = (rng.below(800) + 1, rng.below(400));
                let m = sessions[s].clone();
                admits.push(async move { (s, admit(&m, est, out).await) });
            }
        }
        let host_now = machine_totals(&host);
        let (results, mid) = futures::join!(futures::future::join_all(admits), host_now);
        assert!(mid.settled + mid.reserved <= CEILING, "mid-round: {mid:?}");
        for (s, result) in results {
            match result {
                Ok(r) => {
                    granted += 1;
                    open.push((s, r));
                }
                Err(_) => refused += 1,
            }
        }
        let after = machine_totals(&host).await;
        assert!(after.settled + after.reserved <= CEILING, "after a round: {after:?}");
    }
    for (s, r) in open.drain(..) {
        settle(&sessions[s], &r, r.estimated_input, r.max_output);
    }
    let mut sum = 0;
    for (i, s) in sessions.iter().enumerate() {
        let t = totals(s).await;
        assert_eq!((t.reserved, t.open), (0, 0));
        if i % 5 == 0 {
            assert!(t.settled <= 3_000, "session {i} passed its ceiling: {t:?}");
        }
        sum += t.settled;
    }
    let host_end = machine_totals(&host).await;
    assert!(sum <= CEILING, "settled {sum} > ceiling {CEILING}");
    assert_eq!((host_end.settled, host_end.reserved), (sum, 0));
    assert_eq!(ledger_total(&host, dir.path()).await, sum);
    assert!(
        granted > 100 && refused > 100 && host_end.refusals > 0,
        "the ceiling was contested: {granted} granted, {refused} refused"
    );
}

#[test]
fn a_book_rebuilt_from_the_journal_counts_settled_calls_charges_open_ones_in_full_and_continues_ids() {
    let text: Vec<u8> = [
        r#"{"k":"reserve","r":1,"est":100,"max":50}"#,
        r#"{"k":"settle","r":1,"c":120}"#,
        r#"{"k":"reserve","r":2,"est":200,"max":100}"#,
        r#"{"k":"settle","r":2,"c":250}"#,
        r#"{"k":"reserve","r":3,"est":300,"max":100}"#,
    ]
    .iter()
    .enumerate()
    .flat_map(|(i, l)| capsule_protocol::journal_line::seal_line(l.as_bytes().to_vec(), i as u64 + 1))
    .chain(b"{\"k\":\"sett".iter().copied())
    .collect();
    let mut book = super::Book::default();
    let charged = super::rebuild(&mut book, &capsule_protocol::journal_line::scan(&text).records);
    assert_eq!(charged, vec![(3, 400)], "the call in flight at the stop is charged in full");
    assert_eq!(book.totals.settled, 120 + 250 + 400);
    assert_eq!(book.next_id, 3, "the next reservation is 4: ids never repeat");
}

#[tokio::test]
async fn a_resumed_session_keeps_its_spend_and_never_reuses_a_reservation_id() {
    let dir = tempfile::tempdir().expect("tempdir");
    let journal = dir.path().join("spend.jsonl");
    let args = |book: SessionBook| SpendArgs {
        journal: Some(journal.clone()),
        book,
        ..SpendArgs::new("ses_r", Some(1000), None)
    };
    let (m, _) = Actor::spawn(None, SpendMeter, args(SessionBook::default())).await.expect("spawn");
    let r1 = admit(&m, 300, 100).await.expect("fits");
    m.cast(SpendMsg::Settle { reservation: r1.id, input: 300, output: 50, actual: None }).expect("settle");
    let r2 = admit(&m, 200, 100).await.expect("fits");
    m.stop_and_wait(None, None).await.expect("stop");
    // A new process: a fresh book read from the journal. r2 was in flight: charged 300 in full.
    let (m, _) = Actor::spawn(None, SpendMeter, args(SessionBook::default())).await.expect("spawn");
    let t = m.call(SpendMsg::Totals, None).await.expect("totals").expect("answered");
    assert_eq!(t.settled, 350 + 300);
    let r3 = admit(&m, 100, 100).await.expect("650 + 200 fits 1000");
    assert!(r3.id > r2.id, "ids continue: {} after {}", r3.id, r2.id);
    assert!(admit(&m, 100, 100).await.is_err(), "650 + 200 + 200 passes 1000");
}
