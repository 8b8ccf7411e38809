//! The check `--resume` makes of a session's journal files before anything reads them
//! (CONTRACT §9, [`capsule_protocol::journal_line`]).
//!
//! For each of `trace.jsonl`, `conversation.jsonl`, `frames.jsonl` and `spend.jsonl`:
//! - a torn last line (a write cut short by the stop) is cut off and reported;
//! - a complete line that does not verify is damage: the resume is refused with `E-RUN-063`
//!   naming the file and the line, unless the operator asked to repair, which keeps the valid
//!   prefix, cuts the rest and reports how many lines were dropped.
//!
//! It also finds the first frame id the resumed session may use: one above every id that ever
//! reached `frames.jsonl`, counting the lines it cut, so a frame id is never used twice.

use capsule_protocol::journal_line::{Scan, scan};
use capsule_runtime::{Beneath, FileMode};
use std::io::Read;
use std::path::Path;

use crate::error::LaunchError;

/// The journal files, in the order they are checked.
pub const JOURNAL_FILES: [&str; 4] = ["trace.jsonl", "conversation.jsonl", "frames.jsonl", "spend.jsonl"];

/// The largest `"id":<digits>` in `bytes` (frame lines put the frame id there).
fn max_id(bytes: &[u8]) -> u64 {
    let key = b"\"id\":";
    let mut max = 0;
    let mut i = 0;
    while let Some(at) = bytes[i..].windows(key.len()).position(|w| w == key) {
        let start = i + at + key.len();
        let digits: Vec<u8> = bytes[start..].iter().take_while(|b| b.is_ascii_digit()).copied().take(20).collect();
        if let Some(n) = std::str::from_utf8(&digits).ok().and_then(|d| d.parse::<u64>().ok()) {
            max = max.max(n);
        }
        i = start;
    }
    max
}

fn describe(file: &str, s: &Scan, cut_lines: usize) -> String {
    let mut parts = Vec::new();
    if s.torn_bytes > 0 {
        parts.push(format!("cut a torn last line of {} bytes", s.torn_bytes));
    }
    if cut_lines > 0 {
        parts.push(format!("dropped {cut_lines} lines from line {} on (--repair)", s.damaged_line.unwrap_or(0)));
    }
    format!("{file}: {}", parts.join("; "))
}

/// Check (and cut, as allowed) every journal file of the session folder `dir`. Returns what
/// was cut, and the first frame id the session may use.
pub fn check(dir: &Path, repair: bool) -> Result<(Vec<String>, u64), LaunchError> {
    let root = Beneath::open(dir).map_err(LaunchError::Files)?;
    let mut reports = Vec::new();
    let mut next_frame_id = 1;
    for file in JOURNAL_FILES {
        if !root.exists(file) {
            continue;
        }
        let mut f = root.file(file, FileMode::Read).map_err(LaunchError::Files)?;
        let mut bytes = Vec::new();
        f.read_to_end(&mut bytes).map_err(|source| LaunchError::Io { path: dir.join(file), source })?;
        let s = scan(&bytes);
        if file == "frames.jsonl" {
            next_frame_id = max_id(&bytes).saturating_add(1);
        }
        if let Some(line) = s.damaged_line
            && !repair
        {
            return Err(LaunchError::JournalDamaged {
                file: dir.join(file),
                line,
                lines: s.lines_after_damage,
                good: s.records.len(),
            });
        }
        let cut_lines = if s.damaged() { s.lines_after_damage } else { 0 };
        if s.torn_bytes > 0 || cut_lines > 0 {
            let w = root.file(file, FileMode::Append).map_err(LaunchError::Files)?;
            w.set_len(s.valid_bytes as u64).map_err(|source| LaunchError::Io { path: dir.join(file), source })?;
            w.sync_all().map_err(|source| LaunchError::Io { path: dir.join(file), source })?;
            let report = describe(file, &s, cut_lines);
            tracing::warn!(session_dir = %dir.display(), "{report}");
            reports.push(report);
        }
    }
    Ok((reports, next_frame_id))
}

/// An append-only journal file that numbers and seals each line it writes
/// ([`capsule_protocol::journal_line::seal_line`]). Opening it continues the numbering after
/// the file's valid lines and cuts a torn last line, so a new line is never merged with one.
pub struct SealedFile {
    file: std::fs::File,
    next: u64,
}

impl SealedFile {
    /// Open (creating `0600`, never through a link) for appending.
    pub fn open(path: &Path) -> Result<SealedFile, capsule_runtime::BeneathError> {
        let io = |source| capsule_runtime::BeneathError::Io { path: path.to_path_buf(), source };
        let mut bytes = Vec::new();
        if let Ok(mut f) = Beneath::file_at(path, FileMode::Read) {
            f.read_to_end(&mut bytes).map_err(io)?;
        }
        let s = scan(&bytes);
        let file = Beneath::file_at(path, FileMode::Append)?;
        if s.torn_bytes > 0 && !s.damaged() {
            file.set_len(s.valid_bytes as u64).map_err(io)?;
            tracing::warn!(path = %path.display(), torn_bytes = s.torn_bytes, "journal: a torn last line was cut before appending");
        }
        let next =
            if s.damaged() { (s.records.len() + s.lines_after_damage) as u64 + 1 } else { s.records.len() as u64 + 1 };
        Ok(SealedFile { file, next })
    }

    /// Write one serialized JSON object as the next line, with one `write` call.
    pub fn append(&mut self, object: Vec<u8>) -> std::io::Result<()> {
        use std::io::Write;
        let line = capsule_protocol::journal_line::seal_line(object, self.next);
        self.file.write_all(&line)?;
        self.next += 1;
        Ok(())
    }

    /// Write several serialized JSON objects as the next lines, with one `write` call (a step's
    /// lines of one record). When it fails, none counts as written and the numbering goes on
    /// from the last line before them, as after a failed [`SealedFile::append`].
    pub fn append_many(&mut self, objects: Vec<Vec<u8>>) -> std::io::Result<()> {
        use std::io::Write;
        let mut lines = Vec::with_capacity(objects.iter().map(|o| o.len() + 40).sum());
        let mut n = self.next;
        for object in objects {
            lines.extend_from_slice(&capsule_protocol::journal_line::seal_line(object, n));
            n += 1;
        }
        self.file.write_all(&lines)?;
        self.next = n;
        Ok(())
    }

    /// Make the lines written so far durable.
    pub fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_largest_numeric_id_is_found_even_in_damaged_bytes() {
        assert_eq!(max_id(br#"{"id":3,"event":"text"}{"id":17,"ev"#), 17);
        assert_eq!(max_id(br#"{"id":"tsk_1"} {"id":2}"#), 2);
        assert_eq!(max_id(b"nothing here"), 0);
    }

    #[test]
    fn a_steps_lines_written_in_one_call_verify_and_number_on_from_the_lines_before() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("trace.jsonl");
        let mut f = SealedFile::open(&path).expect("open");
        f.append(br#"{"a":1}"#.to_vec()).expect("one line");
        f.append_many(vec![br#"{"b":2}"#.to_vec(), br#"{"c":3}"#.to_vec()]).expect("two lines");
        drop(f);
        let mut f = SealedFile::open(&path).expect("reopen");
        f.append_many(vec![br#"{"d":4}"#.to_vec()]).expect("after a reopen");
        let bytes = std::fs::read(&path).expect("read");
        let s = scan(&bytes);
        assert!(!s.damaged() && s.torn_bytes == 0, "every line verifies: {s:?}");
        let numbers: Vec<String> = s.records.iter().map(|r| String::from_utf8_lossy(r).into_owned()).collect();
        assert_eq!(numbers.len(), 4, "{numbers:?}");
        for (i, (line, key)) in numbers.iter().zip(["a", "b", "c", "d"]).enumerate() {
            assert!(line.starts_with(&format!("{{\"{key}\":")), "line {} holds `{key}`: {line}", i + 1);
            assert!(line.contains(&format!("\"_n\":{}", i + 1)), "line {} is numbered {}: {line}", i + 1, i + 1);
        }
        assert_eq!(bytes.iter().filter(|&&b| b == b'\n').count(), 4, "one line per object");
    }
}
