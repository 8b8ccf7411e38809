//! The machine meter's ledger: one append-only JSON-lines file per UTC day
//! (`spend-YYYY-MM-DD.jsonl`), one line per settlement.
//!
//! Guarantees: a line counts only when it is complete (ends with `\n`). A torn last line (a
//! crash mid-write) is ignored, reported ([`Recovery`]) and cut off before the next append, so
//! it is counted neither now nor after any later restart. A line whose `(session, reservation)`
//! was already read is a duplicate and is not counted again. Lines are written by one thread
//! that batches them and calls `sync_data` before acknowledging any of them (group commit: one
//! fsync, ~4 ms on this disk, covers every settlement that arrived meanwhile), so the meter's
//! mailbox never waits on the disk.
//!
//! Not done here: deciding what to charge (the meter does), or rotating old files away.

use ractor::RpcReplyPort;
use serde::{Deserialize, Serialize};
use std::collections::HashSet;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
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

/// A day's file as read.
pub(crate) struct Loaded {
    pub recovery: Recovery,
    pub seen: HashSet<(std::sync::Arc<str>, u64)>,
}

/// Read `dir/spend-<day>.jsonl` (absent: empty), cutting off a torn last line.
pub(crate) fn load(dir: &Path, day: UtcDay) -> std::io::Result<Loaded> {
    let path = dir.join(day.file_name());
    let mut recovery = Recovery { day: day.to_string(), ..Default::default() };
    let mut seen = HashSet::new();
    let bytes = match std::fs::read(&path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Loaded { recovery, seen }),
        Err(e) => return Err(e),
    };
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    if complete < bytes.len() {
        recovery.torn_bytes = (bytes.len() - complete) as u64;
        cut_to(&path, complete as u64)?;
        tracing::warn!(path = %path.display(), torn_bytes = recovery.torn_bytes, "spend ledger: torn last line (a crash mid-write) ignored and cut off");
    }
    for line in bytes[..complete].split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
        match serde_json::from_slice::<LedgerLine>(line) {
            Ok(l) => {
                if seen.insert((std::sync::Arc::from(l.session.as_str()), l.reservation)) {
                    recovery.lines += 1;
                    recovery.tokens += l.tokens;
                } else {
                    recovery.duplicates += 1;
                }
            }
            Err(e) => {
                recovery.corrupt += 1;
                tracing::warn!(path = %path.display(), error = %e, "spend ledger: unreadable line ignored");
            }
        }
    }
    if recovery.duplicates > 0 {
        tracing::warn!(path = %path.display(), duplicates = recovery.duplicates, "spend ledger: repeated settlements counted once");
    }
    Ok(Loaded { recovery, seen })
}

fn cut_to(path: &Path, len: u64) -> std::io::Result<()> {
    let f = OpenOptions::new().write(true).open(path)?;
    f.set_len(len)?;
    f.sync_data()
}

/// Open a day's file for appending; if it ends in a torn line, cut it off first.
fn open_append(path: &Path) -> std::io::Result<File> {
    let mut f = OpenOptions::new().create(true).read(true).append(true).open(path)?;
    let len = f.metadata()?.len();
    if len > 0 {
        let mut last = [0u8];
        f.seek(SeekFrom::Start(len - 1))?;
        f.read_exact(&mut last)?;
        if last[0] != b'\n' {
            let mut all = Vec::new();
            f.seek(SeekFrom::Start(0))?;
            f.read_to_end(&mut all)?;
            let keep = all.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1) as u64;
            tracing::warn!(path = %path.display(), torn_bytes = len - keep, "spend ledger: torn last line cut off before appending");
            cut_to(path, keep)?;
        }
    }
    Ok(f)
}

/// How the writer is doing.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct LedgerHealth {
    /// Lines written and synced.
    pub written: u64,
    /// Lines that failed to be written or synced (logged).
    pub failed: u64,
}

/// Work for the writer thread.
pub(crate) enum Job {
    /// Append a line to a day's file; `ack` gets whether it is durable.
    Line { day: UtcDay, bytes: Vec<u8>, ack: Option<RpcReplyPort<bool>> },
    /// Answer once every line sent before is durable.
    Flush(RpcReplyPort<LedgerHealth>),
}

/// The writer thread's handle. Dropping it finishes the pending lines and joins the thread.
pub(crate) struct Writer {
    tx: Option<mpsc::Sender<Job>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Writer {
    /// Create the folder and start the thread.
    pub fn spawn(dir: PathBuf) -> std::io::Result<Writer> {
        std::fs::create_dir_all(&dir)?;
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new().name("spend-ledger".into()).spawn(move || run(&dir, rx))?;
        Ok(Writer { tx: Some(tx), thread: Some(thread) })
    }

    /// Queue a job (lost only if the thread died, which is logged there).
    pub fn send(&self, job: Job) {
        if let Some(tx) = &self.tx
            && tx.send(job).is_err()
        {
            tracing::error!("spend ledger: the writer thread is gone; a settlement was not written");
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

fn run(dir: &Path, rx: mpsc::Receiver<Job>) {
    let mut file: Option<(UtcDay, File)> = None;
    let mut health = LedgerHealth::default();
    while let Ok(first) = rx.recv() {
        let mut batch = vec![first];
        while batch.len() < 4096
            && let Ok(j) = rx.try_recv()
        {
            batch.push(j);
        }
        let mut acks: Vec<(Option<RpcReplyPort<bool>>, bool)> = Vec::new();
        let mut flushes = Vec::new();
        let mut dirty = false;
        let mut synced_ok = true;
        for job in batch {
            match job {
                Job::Line { day, bytes, ack } => {
                    if file.as_ref().is_none_or(|(d, _)| *d != day) {
                        if dirty && let Some((_, f)) = &file {
                            synced_ok &= f.sync_data().is_ok();
                        }
                        dirty = false;
                        file = open_append(&dir.join(day.file_name()))
                            .map_err(
                                |e| tracing::error!(error = %e, day = %day, "spend ledger: cannot open the day's file"),
                            )
                            .ok()
                            .map(|f| (day, f));
                    }
                    let ok = match &mut file {
                        Some((_, f)) => f
                            .write_all(&bytes)
                            .map_err(|e| tracing::error!(error = %e, "spend ledger: write failed"))
                            .is_ok(),
                        None => false,
                    };
                    dirty |= ok;
                    acks.push((ack, ok));
                }
                Job::Flush(reply) => flushes.push(reply),
            }
        }
        if dirty && let Some((_, f)) = &file {
            synced_ok &= f.sync_data().map_err(|e| tracing::error!(error = %e, "spend ledger: sync failed")).is_ok();
        }
        for (ack, ok) in acks {
            let durable = ok && synced_ok;
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
