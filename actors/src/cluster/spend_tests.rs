//! The day total's changes against a store that loses answers: a write that was stored but
//! whose answer never came is tried again from a fresh read and is in the total once.

use super::*;
use std::sync::Mutex;

/// A day store in memory that, for the next `lose` writes, reports a failure that is not a
/// conflict: after storing the write (its answer was lost), or, with `unreachable`, without.
#[derive(Default)]
struct Forgetful {
    day: Mutex<Option<(DayTotals, u64)>>,
    lose: Mutex<u32>,
    unreachable: bool,
    writes: Mutex<u32>,
}

fn no_answer() -> ClusterError {
    ClusterError::JetStream { what: "write the day total".into(), source: "no answer".into() }
}

impl DayStore for Forgetful {
    async fn read(&self, _day: &str) -> Result<Option<(DayTotals, u64)>, ClusterError> {
        Ok(self.day.lock().expect("lock").clone())
    }

    async fn write(&self, _day: &str, next: &DayTotals, revision: Option<u64>) -> Result<(), (bool, ClusterError)> {
        let mut day = self.day.lock().expect("lock");
        if day.as_ref().map(|(_, r)| *r) != revision {
            return Err((true, ClusterError::Fenced { subject: "day".into(), expected: 0 }));
        }
        let mut lose = self.lose.lock().expect("lock");
        if self.unreachable && *lose > 0 {
            *lose -= 1;
            return Err((false, no_answer()));
        }
        *day = Some((next.clone(), revision.unwrap_or(0) + 1));
        *self.writes.lock().expect("lock") += 1;
        if *lose > 0 {
            *lose -= 1;
            return Err((false, no_answer()));
        }
        Ok(())
    }
}

fn totals(store: &Forgetful) -> (u64, u64, usize) {
    let day = store.day.lock().expect("lock").clone().unwrap_or_default().0;
    (day.settled, day.reserved, day.open.len())
}

#[tokio::test(start_paused = true)]
async fn a_reservation_and_a_settlement_whose_answers_were_lost_count_once() {
    let store = Forgetful::default();
    *store.lose.lock().expect("lock") = 1;
    assert_eq!(reserve(&store, "d", "m/s/1", 100, 1000).await.expect("granted after a lost answer"), Ok(()));
    assert_eq!(totals(&store), (0, 100, 1), "reserved once");
    assert_eq!(*store.writes.lock().expect("lock"), 1, "the second try saw the first was stored and wrote nothing");

    *store.lose.lock().expect("lock") = 1;
    settle(&store, "d", "m/s/1", 80).await.expect("settled after a lost answer");
    assert_eq!(totals(&store), (80, 0, 0), "settled once");
    assert_eq!(*store.writes.lock().expect("lock"), 2);
}

#[tokio::test(start_paused = true)]
async fn a_reservation_that_no_longer_fits_after_a_lost_answer_is_granted_not_refused() {
    // The first write (granting the last 100 of 1000) was stored and its answer lost; on the
    // second try the day is full, but it holds this very reservation: granted.
    let store = Forgetful::default();
    *store.day.lock().expect("lock") = Some((DayTotals { settled: 900, ..Default::default() }, 1));
    *store.lose.lock().expect("lock") = 1;
    assert_eq!(reserve(&store, "d", "m/s/2", 100, 1000).await.expect("answered"), Ok(()));
    assert_eq!(totals(&store), (900, 100, 1));
    // Another id no longer fits.
    assert_eq!(reserve(&store, "d", "m/s/3", 1, 1000).await.expect("answered"), Err(1000));
}

#[tokio::test(start_paused = true)]
async fn a_write_that_failed_is_tried_again_and_one_that_never_gets_through_is_an_error() {
    let store = Forgetful { unreachable: true, ..Default::default() };
    *store.lose.lock().expect("lock") = 3;
    assert_eq!(reserve(&store, "d", "m/s/4", 10, 1000).await.expect("granted on the fourth try"), Ok(()));
    assert_eq!((totals(&store), *store.writes.lock().expect("lock")), ((0, 10, 1), 1));
    *store.lose.lock().expect("lock") = u32::MAX;
    let err = reserve(&store, "d", "m/s/5", 10, 1000).await.expect_err("no answer within the patience");
    assert!(matches!(err, ClusterError::JetStream { .. }), "{err}");
    assert_eq!(totals(&store), (0, 10, 1), "nothing of it was stored");
}
