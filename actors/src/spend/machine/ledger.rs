//! The machine meter's ledger format and its syncing thread: one append-only JSON-lines file
//! per UTC day (`spend-YYYY-MM-DD.jsonl`) holding settlements ([`LedgerLine`]) and, beside
//! them, the reservations and releases of every process sharing the folder (read and written
//! by [`super::shared`], under the folder's lock).
//!
//! Guarantees: a line counts only when it is complete (ends with `\n`); a torn last line (a
//! crash mid-write) is ignored, reported ([`Recovery`]) and cut off. A line whose
//! `(session, reservation)` was already read is a duplicate and is not counted again.
//! Settlements are made durable by one thread that batches them and calls `sync_data` before
//! acknowledging any of them (group commit: one fsync, ~4 ms on this disk, covers every
//! settlement that arrived meanwhile), so the meter's mailbox never waits on the disk.
//!
//! Not done here: deciding what to charge (the meter does), or rotating old files away.

use ractor::RpcReplyPort;
use serde::{Deserialize, Serialize};
use std::fmt;
use std::fs::File;
use std::sync::mpsc;
use std::time::{SystemTime, UNIX_EPOCH};

/// A UTC calendar day, as days since 1970-01-01.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct UtcDay(pub i64);

impl UtcDay {
    /// The UTC day that contains `t`.
    pub fn of(t: SystemTime) -> UtcDay {
        let secs = match t.duration_since(UNIX_EPOCH) {
            Ok(d) => d.as_secs() as i64,
            Err(e) => -(e.duration().as_secs_f64().ceil() as i64),
        };
        UtcDay(secs.div_euclid(86_400))
    }

    /// (year, month 1–12, day 1–31): days since the epoch to the proleptic Gregorian calendar
    /// (H. Hinnant's `civil_from_days`).
    pub fn civil(self) -> (i64, u32, u32) {
        let z = self.0 + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
        let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
        let y = yoe + era * 400 + i64::from(m <= 2);
        (y, m, d)
    }

    /// `spend-YYYY-MM-DD.jsonl`.
    pub fn file_name(self) -> String {
        format!("spend-{self}.jsonl")
    }
}

impl fmt::Display for UtcDay {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (y, m, d) = self.civil();
        write!(f, "{y:04}-{m:02}-{d:02}")
    }
}

/// One settlement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerLine {
    /// Reservation id (unique within its session).
    pub reservation: u64,
    /// Session id.
    pub session: String,
    /// Tokens charged.
    pub tokens: u64,
    /// Of which input.
    pub input: u64,
    /// Of which output.
    pub output: u64,
    /// Milliseconds since the UNIX epoch (the meter's clock).
    pub ts: u64,
    /// Charged in full because its session's meter restarted with the call's outcome unknown.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub abandoned: bool,
}

/// What reading a day's file found.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Recovery {
    /// The day read (`YYYY-MM-DD`).
    pub day: String,
    /// Settlements counted.
    pub lines: u64,
    /// Tokens counted.
    pub tokens: u64,
    /// Bytes of a torn last line that were ignored and cut off (0: none).
    pub torn_bytes: u64,
    /// Complete lines that are not a settlement (ignored).
    pub corrupt: u64,
    /// Lines repeating a settlement already counted (ignored).
    pub duplicates: u64,
}

/// How the syncing thread is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LedgerHealth {
    /// Lines made durable.
    pub written: u64,
    /// Lines that failed to be written or synced (logged).
    pub failed: u64,
}

/// Work for the syncing thread.
pub(crate) enum Job {
    /// A line was appended to `file` (`written` says whether the write succeeded): make it
    /// durable, then answer `ack` with whether it is.
    Sync { file: File, written: bool, ack: Option<RpcReplyPort<bool>> },
    /// Answer once every line sent before is durable.
    Flush(RpcReplyPort<LedgerHealth>),
}

/// The syncing thread's handle (group commit: one `sync_data` covers every line that arrived
/// meanwhile, so the meter's mailbox never waits on the disk). Dropping it finishes the pending
/// jobs and joins the thread.
pub(crate) struct Writer {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    /// Start the thread.
    pub fn spawn() -> std::io::Result<Writer> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new().name("spend-ledger".into()).spawn(move || run(rx))?;
        Ok(Writer { tx: Some(tx), thread: Some(thread) })
    }

    /// Queue a job (lost only if the thread died, which is logged there).
    pub fn send(&self, job: Job) {
        if let Some(tx) = &self.tx
            && tx.send(job).is_err()
        {
            tracing::error!("spend ledger: the syncing thread is gone; a settlement may not be durable");
        }
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(rx: mpsc::Receiver<Job>) {
    let mut health = LedgerHealth::default();
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < 4096
            && let Ok(j) = rx.try_recv()
        {
            batch.push(j);
        }
        let mut acks = Vec::new();
        let mut flushes = Vec::new();
        let mut to_sync: Option<File> = None;
        for job in batch {
            match job {
                Job::Sync { file, written, ack } => {
                    // Lines of one batch are in one day's file but for a day change: sync each
                    // file as it is replaced, and the last one below.
                    if let Some(prev) = to_sync.replace(file)
                        && let Err(e) = prev.sync_data()
                    {
                        tracing::error!(error = %e, "spend ledger: sync failed");
                    }
                    acks.push((ack, written));
                }
                Job::Flush(reply) => flushes.push(reply),
            }
        }
        let synced = to_sync.is_none_or(|f| {
            f.sync_data().map_err(|e| tracing::error!(error = %e, "spend ledger: sync failed")).is_ok()
        });
        for (ack, written) in acks {
            let durable = written && synced;
            if durable {
                health.written += 1;
            } else {
                health.failed += 1;
            }
            if let Some(a) = ack {
                let _ = a.send(durable);
            }
        }
        for f in flushes {
            let _ = f.send(health);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn days_since_the_epoch_become_utc_calendar_dates() {
        let cases = [
            (0, "1970-01-01"),
            (-1, "1969-12-31"),
            (11_016, "2000-02-29"),
            (19_723, "2024-01-01"),
            (19_782, "2024-02-29"),
            (20_088, "2024-12-31"),
            (2_932_896, "9999-12-31"),
        ];
        for (days, date) in cases {
            assert_eq!(UtcDay(days).to_string(), date, "day {days}");
        }
        let just_before_midnight = UNIX_EPOCH + std::time::Duration::from_millis(19_723 * 86_400_000 - 1);
        assert_eq!(UtcDay::of(just_before_midnight).to_string(), "2023-12-31");
        assert_eq!(UtcDay::of(just_before_midnight + std::time::Duration::from_millis(1)).to_string(), "2024-01-01");
        assert_eq!(UtcDay(19_723).file_name(), "spend-2024-01-01.jsonl");
    }
}
