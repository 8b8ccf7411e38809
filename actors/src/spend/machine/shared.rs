//! The ledger as every process on the machine sees it: reservations and settlements of all
//! processes sharing one ledger folder, kept consistent by an OS file lock.
//!
//! Each decision (reserve, settle, release) takes `spend.lock` (`flock`, exclusive), first
//! reads what other processes appended to today's file since this process last looked (only
//! complete lines; the offset advances past the last `\n`), then decides and appends its own
//! line, then unlocks. Since every append happens under the lock, bytes after the last `\n`
//! at lock time can only be a writer that died mid-line: they are cut off and reported.
//!
//! Lines: a settlement is a [`LedgerLine`] (no `kind`, as before); a reservation is
//! `{"kind":"reserve", session, reservation, tokens, owner, ts}`; a release is
//! `{"kind":"release", session, reservation}`. `owner` is `<pid>:<start time>` of the process
//! that reserved. A reservation whose owner is no longer running is charged in full (its call
//! may have been sent and its outcome is unknown) by the next process that takes the lock: it
//! appends an `abandoned` settlement, so every process counts it once.

use serde::{Deserialize, Serialize};
use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::ledger::{LedgerLine, Recovery, UtcDay};
use crate::spend::ReservationId;
use capsule_runtime::{Beneath, FileMode};

/// `(session, reservation)`.
pub(crate) type Key = (Arc<str>, ReservationId);

/// A reservation in flight, this process's or another's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Open {
    pub tokens: u64,
    pub owner: String,
}

#[derive(Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
enum Marker {
    Reserve { session: String, reservation: ReservationId, tokens: u64, owner: String, ts: u64 },
    Release { session: String, reservation: ReservationId },
}

/// This process as an owner: `<pid>:<start time in clock ticks>` (the pair never repeats on
/// one machine, so a recycled pid is not mistaken for a live owner).
pub(crate) fn this_owner() -> String {
    let pid = std::process::id();
    format!("{pid}:{}", start_time(pid).unwrap_or(0))
}

fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 22; fields after the command name (which may hold spaces) start after the last ')'.
    stat.rsplit_once(')')?.1.split_whitespace().nth(19)?.parse().ok()
}

/// Whether the process that wrote `owner` still runs. Unknown shapes count as alive (keeping a
/// reservation open is the safe side: it can only refuse more).
fn alive(owner: &str) -> bool {
    let Some((pid, start)) = owner.split_once(':') else { return true };
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else { return true };
    start_time(pid) == Some(start)
}

/// Today's ledger as this process knows it.
pub(crate) struct SharedLedger {
    dir: PathBuf,
    lock: File,
    pub day: UtcDay,
    file: File,
    offset: u64,
    pub me: String,
    /// Tokens settled today, by every process.
    pub settled: u64,
    /// Settlements counted today.
    pub settlements: u64,
    /// Reservations in flight, by every process.
    pub open: HashMap<Key, Open>,
    /// Reservations already settled today (a repeat is counted once).
    pub seen: HashSet<Key>,
    /// What reading found (torn tail, corrupt lines, duplicates).
    pub recovery: Recovery,
}

fn io_other(e: capsule_runtime::BeneathError) -> std::io::Error {
    std::io::Error::other(e)
}

impl SharedLedger {
    /// Open (creating `0700`/`0600`) the folder, its lock and `day`'s file, and read the file.
    pub fn open(dir: &Path, day: UtcDay) -> std::io::Result<SharedLedger> {
        let root = Beneath::create(dir).map_err(io_other)?;
        let lock = root.file("spend.lock", FileMode::Append).map_err(io_other)?;
        let file = root.file(&day.file_name(), FileMode::ReadAppend).map_err(io_other)?;
        let mut l = SharedLedger {
            dir: dir.to_path_buf(),
            lock,
            day,
            file,
            offset: 0,
            me: this_owner(),
            settled: 0,
            settlements: 0,
            open: HashMap::new(),
            seen: HashSet::new(),
            recovery: Recovery { day: day.to_string(), ..Default::default() },
        };
        l.locked(|_| Ok(()))?;
        Ok(l)
    }

    /// Tokens reserved by calls in flight, every process's.
    pub fn reserved(&self) -> u64 {
        self.open.values().map(|o| o.tokens).sum()
    }

    /// Move to `day`'s file (a new UTC day): settled totals start from that file; reservations
    /// still open carry over.
    pub fn roll(&mut self, day: UtcDay) -> std::io::Result<()> {
        if day == self.day {
            return Ok(());
        }
        let root = Beneath::open(&self.dir).map_err(io_other)?;
        self.file = root.file(&day.file_name(), FileMode::ReadAppend).map_err(io_other)?;
        self.day = day;
        self.offset = 0;
        self.settled = 0;
        self.settlements = 0;
        self.seen.clear();
        self.recovery = Recovery { day: day.to_string(), ..Default::default() };
        self.locked(|_| Ok(()))
    }

    /// Take the lock, catch up with what others wrote, charge dead owners' reservations, run
    /// `f`, and release the lock.
    pub fn locked<T>(&mut self, f: impl FnOnce(&mut Self) -> std::io::Result<T>) -> std::io::Result<T> {
        self.lock.lock()?;
        let out = self.catch_up().and_then(|()| self.reap()).and_then(|()| f(self));
        let unlocked = self.lock.unlock();
        let out = out?;
        unlocked?;
        Ok(out)
    }

    fn catch_up(&mut self) -> std::io::Result<()> {
        // Nothing appended since the last look (the common case): no seek, no read.
        if self.file.metadata()?.len() == self.offset {
            return Ok(());
        }
        let mut bytes = Vec::new();
        self.file.seek(SeekFrom::Start(self.offset))?;
        (&self.file).read_to_end(&mut bytes)?;
        let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
        if complete < bytes.len() {
            // Every append is made under the lock we hold: this is a writer that died mid-line.
            let torn = (bytes.len() - complete) as u64;
            self.recovery.torn_bytes += torn;
            self.file.set_len(self.offset + complete as u64)?;
            self.file.sync_data()?;
            tracing::warn!(day = %self.day, torn_bytes = torn, "spend ledger: torn last line (a crash mid-write) ignored and cut off");
        }
        for line in bytes[..complete].split(|b| *b == b'\n').filter(|l| !l.is_empty()) {
            self.apply(line);
        }
        self.offset += complete as u64;
        Ok(())
    }

    fn apply(&mut self, line: &[u8]) {
        if let Ok(m) = serde_json::from_slice::<Marker>(line) {
            match m {
                Marker::Reserve { session, reservation, tokens, owner, .. } => {
                    let key: Key = (Arc::from(session.as_str()), reservation);
                    if !self.seen.contains(&key) {
                        self.open.insert(key, Open { tokens, owner });
                    }
                }
                Marker::Release { session, reservation } => {
                    self.open.remove(&(Arc::from(session.as_str()), reservation));
                }
            }
            return;
        }
        match serde_json::from_slice::<LedgerLine>(line) {
            Ok(l) => {
                let key: Key = (Arc::from(l.session.as_str()), l.reservation);
                self.open.remove(&key);
                if self.seen.insert(key) {
                    self.settled += l.tokens;
                    self.settlements += 1;
                    self.recovery.lines += 1;
                    self.recovery.tokens += l.tokens;
                } else {
                    self.recovery.duplicates += 1;
                    tracing::warn!(session = %l.session, reservation = l.reservation, "spend ledger: a repeated settlement counted once");
                }
            }
            Err(e) => {
                self.recovery.corrupt += 1;
                tracing::warn!(day = %self.day, error = %e, "spend ledger: unreadable line ignored");
            }
        }
    }

    fn reap(&mut self) -> std::io::Result<()> {
        let dead: Vec<(Key, u64)> = self
            .open
            .iter()
            .filter(|(_, o)| o.owner != self.me && !alive(&o.owner))
            .map(|(k, o)| (k.clone(), o.tokens))
            .collect();
        for (key, tokens) in dead {
            tracing::warn!(session = %key.0, reservation = key.1, tokens, "spend: a reservation of a process that is gone is charged in full");
            self.settle_line(key, tokens, 0, true, 0)?;
        }
        Ok(())
    }

    fn append(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.file.write_all(bytes)?;
        self.offset += bytes.len() as u64;
        Ok(())
    }

    /// Append a reservation (under the lock).
    pub fn reserve_line(&mut self, key: Key, tokens: u64, ts: u64) -> std::io::Result<()> {
        let m = Marker::Reserve { session: key.0.to_string(), reservation: key.1, tokens, owner: self.me.clone(), ts };
        let mut bytes = serde_json::to_vec(&m).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        self.append(&bytes)?;
        self.open.insert(key, Open { tokens, owner: self.me.clone() });
        Ok(())
    }

    /// Append a release (under the lock).
    pub fn release_line(&mut self, key: Key) -> std::io::Result<()> {
        if self.open.remove(&key).is_none() {
            return Ok(());
        }
        let m = Marker::Release { session: key.0.to_string(), reservation: key.1 };
        let mut bytes = serde_json::to_vec(&m).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        self.append(&bytes)
    }

    /// Append a settlement (under the lock), capped at what was reserved; false when the
    /// reservation was already settled (counted once).
    pub fn settle_line(
        &mut self,
        key: Key,
        input: u64,
        output: u64,
        abandoned: bool,
        ts: u64,
    ) -> std::io::Result<bool> {
        let reserved = self.open.remove(&key).map(|o| o.tokens);
        if self.seen.contains(&key) {
            tracing::warn!(session = %key.0, reservation = key.1, "spend: a reservation settled twice; counted once");
            return Ok(false);
        }
        let (input, output) = match reserved {
            Some(r) => (input.min(r), output.min(r - input.min(r))),
            None => (input, output),
        };
        let line = LedgerLine {
            reservation: key.1,
            session: key.0.to_string(),
            tokens: input + output,
            input,
            output,
            ts,
            abandoned,
        };
        let mut bytes = serde_json::to_vec(&line).map_err(std::io::Error::other)?;
        bytes.push(b'\n');
        self.append(&bytes)?;
        self.seen.insert(key);
        self.settled += input + output;
        self.settlements += 1;
        Ok(true)
    }

    /// A handle on today's file for the syncing thread.
    pub fn file_handle(&self) -> std::io::Result<File> {
        self.file.try_clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn two_handles_on_one_folder_see_each_others_reservations_and_settlements() {
        let dir = tempfile::tempdir().expect("tmp");
        let day = UtcDay(19_723);
        let mut a = SharedLedger::open(dir.path(), day).expect("a");
        let mut b = SharedLedger::open(dir.path(), day).expect("b");
        a.locked(|l| l.reserve_line((Arc::from("s1"), 1), 100, 0)).expect("reserve");
        b.locked(|_| Ok(())).expect("catch up");
        assert_eq!(b.reserved(), 100, "b sees a's reservation");
        a.locked(|l| l.settle_line((Arc::from("s1"), 1), 40, 20, false, 0)).expect("settle");
        b.locked(|_| Ok(())).expect("catch up");
        assert_eq!((b.reserved(), b.settled), (0, 60));
    }

    #[test]
    fn a_dead_owners_reservation_is_charged_in_full_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let day = UtcDay(19_723);
        let path = dir.path().join(day.file_name());
        let mut a = SharedLedger::open(dir.path(), day).expect("a");
        // A reservation by a process that is not running (pid 0 never is, for us).
        std::fs::write(
            &path,
            "{\"kind\":\"reserve\",\"session\":\"s\",\"reservation\":7,\"tokens\":500,\"owner\":\"0:1\",\"ts\":0}\n",
        )
        .expect("plant");
        a.offset = 0;
        a.locked(|_| Ok(())).expect("reap");
        assert_eq!((a.reserved(), a.settled), (0, 500));
        let mut b = SharedLedger::open(dir.path(), day).expect("b");
        b.locked(|_| Ok(())).expect("read");
        assert_eq!((b.reserved(), b.settled, b.settlements), (0, 500, 1), "charged once, seen by all");
    }

    #[test]
    fn this_process_is_alive_and_a_made_up_one_is_not() {
        assert!(alive(&this_owner()));
        assert!(!alive("0:1"));
        assert!(!alive(&format!("{}:1", std::process::id())), "same pid, other start time");
    }
}
