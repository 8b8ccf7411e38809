//! The session's spend journal (`<session>/spend.jsonl`): its line format, the meter's writes,
//! and rebuilding a book from it on `--resume`.

use super::{Book, ReservationId, SpendState};
use std::collections::HashMap;

/// One line of the session's spend journal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "k", rename_all = "snake_case")]
pub(super) enum SpendLine {
    /// A reservation, written before its call is sent.
    Reserve {
        /// Reservation id.
        r: ReservationId,
        /// Estimated input.
        est: u64,
        /// Output cap.
        max: u64,
    },
    /// A settlement: `c` tokens charged.
    Settle {
        /// Reservation id.
        r: ReservationId,
        /// Tokens charged.
        c: u64,
    },
}

impl SpendState {
    pub(super) fn write(&mut self, line: SpendLine) {
        let Some(f) = &mut self.journal else { return };
        if let Err(e) = f.append(serde_json::to_vec(&line).unwrap_or_default()) {
            tracing::error!(session = %self.session, error = %e, "spend: cannot write the session's spend journal");
        }
    }
}

/// Rebuild a book from the session's spend journal: settled tokens counted, the reservation
/// counter continued, and reservations never settled (their process stopped with the call's
/// outcome unknown) charged in full. Returns those charged, to be written as settlements.
pub(super) fn rebuild(book: &mut Book, records: &[Vec<u8>]) -> Vec<(ReservationId, u64)> {
    let mut open: HashMap<ReservationId, (u64, u64)> = HashMap::new();
    for line in records {
        match serde_json::from_slice::<SpendLine>(line) {
            Ok(SpendLine::Reserve { r, est, max }) => {
                book.next_id = book.next_id.max(r);
                open.insert(r, (est, max));
            }
            Ok(SpendLine::Settle { r, c }) => {
                book.next_id = book.next_id.max(r);
                if let Some((est, _)) = open.remove(&r) {
                    book.totals.settled += c;
                    book.totals.calls += 1;
                    book.totals.estimated_input += est;
                }
            }
            Err(e) => tracing::warn!(error = %e, "spend: unreadable record of the session's spend journal ignored"),
        }
    }
    let mut charged: Vec<(ReservationId, u64)> = open.into_iter().map(|(r, (est, max))| (r, est + max)).collect();
    charged.sort_unstable();
    for (_, tokens) in &charged {
        book.totals.settled += tokens;
        book.totals.calls += 1;
    }
    charged
}
