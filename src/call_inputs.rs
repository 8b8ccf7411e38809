//! The inputs of a session's tool calls, for the terminal printer: no frame carries a call's
//! input, but the session journals `tool_call_started` (with the input) in its `trace.jsonl`
//! before the tool runs.
//!
//! The trace is read on from where the last read stopped, so each finished call costs the
//! bytes journaled since the one before. Reading the trace's tail again for every call cost a
//! turn more as the trace grew, up to a 64 KiB read and scan per call, on the one runtime
//! worker the session itself runs on.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom};
use std::path::PathBuf;

/// How much of the end of a trace the first read takes: the printer starts with the session,
/// so its trace is short then, and a longer one (a session picked up again) is not read whole.
const FIRST_READ: u64 = 64 * 1024;

/// The longest unfinished line kept between reads; a longer one is dropped (its input is not
/// shown) rather than held in memory without bound.
const LONGEST_LINE: usize = 1 << 20;

/// Inputs of calls started and not yet shown, at most; the oldest go first (a call whose
/// artifact never came).
const PENDING: usize = 256;

/// The shown input's length, in characters, before it is cut with `…`.
const SHOWN: usize = 80;

/// A session's trace, read as it grows, and the inputs of the calls it has started.
pub(crate) struct CallInputs {
    path: PathBuf,
    /// Open once the trace exists; positioned after the last whole line read (plus `partial`).
    file: Option<File>,
    /// The start of a line whose end has not been written yet.
    partial: Vec<u8>,
    /// Whether `partial` is the middle of a line whose start was skipped (not to be parsed).
    skipping: bool,
    /// `(call id, input as JSON text)`, oldest first.
    pending: VecDeque<(String, String)>,
}

impl CallInputs {
    /// For the trace at `path` (which may not exist yet).
    pub(crate) fn new(path: PathBuf) -> CallInputs {
        CallInputs { path, file: None, partial: Vec::new(), skipping: false, pending: VecDeque::new() }
    }

    /// The input of call `id`, shortened to one line, or `None` when the trace has not named
    /// it. Each call's input is given once.
    pub(crate) fn take(&mut self, id: &str) -> Option<String> {
        self.read_on();
        let at = self.pending.iter().position(|(call, _)| call == id)?;
        let (_, input) = self.pending.remove(at)?;
        Some(if input.chars().count() > SHOWN {
            format!("{}…", input.chars().take(SHOWN).collect::<String>())
        } else {
            input
        })
    }

    /// Read what the trace gained since the last read and note each call it started.
    fn read_on(&mut self) {
        if self.file.is_none() {
            self.file = self.open();
        }
        let Some(file) = &mut self.file else { return };
        let mut bytes = std::mem::take(&mut self.partial);
        // A failed read keeps what it read before failing; the next read goes on from there.
        let _ = file.read_to_end(&mut bytes);
        let whole = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        self.partial = bytes.split_off(whole);
        let mut lines = bytes.split(|&b| b == b'\n');
        if self.skipping && whole > 0 {
            // The end of a line whose start was not read.
            lines.next();
            self.skipping = false;
        }
        for line in lines {
            self.note(line);
        }
        if self.skipping || self.partial.len() > LONGEST_LINE {
            // Still inside a line that is skipped, or one too long to keep: none of it is kept.
            self.partial.clear();
            self.skipping = true;
        }
    }

    /// Open the trace at the start of a whole line within its last [`FIRST_READ`] bytes.
    fn open(&mut self) -> Option<File> {
        let mut file = File::open(&self.path).ok()?;
        let len = file.metadata().ok()?.len();
        let start = len.saturating_sub(FIRST_READ);
        if start > 0 {
            file.seek(SeekFrom::Start(start)).ok()?;
            // The line cut at `start` is not whole.
            self.skipping = true;
        }
        Some(file)
    }

    /// Keep the input of a `tool_call_started` line, as the trace wrote it.
    fn note(&mut self, line: &[u8]) {
        let Ok(text) = std::str::from_utf8(line) else { return };
        if !text.contains("\"tool_call_started\"") {
            return;
        }
        let Ok(event) = serde_json::from_str::<Started<'_>>(text) else { return };
        if event.event_type != "tool_call_started" {
            return;
        }
        if self.pending.len() == PENDING {
            self.pending.pop_front();
        }
        self.pending.push_back((event.tool_call_id.into_owned(), event.input.get().to_string()));
    }
}

/// The fields of a trace line the printer reads; the others are skipped unread.
#[derive(serde::Deserialize)]
struct Started<'a> {
    #[serde(borrow)]
    event_type: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    tool_call_id: std::borrow::Cow<'a, str>,
    #[serde(borrow)]
    input: &'a serde_json::value::RawValue,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn started(id: &str, path: &str) -> String {
        format!(
            "{}\n",
            serde_json::json!({"event_type": "tool_call_started", "tool_call_id": id, "input": {"path": path}})
        )
    }

    fn append(path: &std::path::Path, text: &str) {
        let mut f = std::fs::OpenOptions::new().create(true).append(true).open(path).expect("open");
        f.write_all(text.as_bytes()).expect("write");
    }

    #[test]
    fn each_calls_input_is_read_once_from_what_the_trace_gained_since_the_last_call() {
        let dir = tempfile::tempdir().expect("tempdir");
        let trace = dir.path().join("trace.jsonl");
        let mut inputs = CallInputs::new(trace.clone());
        assert_eq!(inputs.take("a"), None, "no trace yet");
        append(&trace, &started("a", "first"));
        // A line still being written is kept for the next read, not parsed half-way.
        let b = started("b", "second");
        let (head, rest) = b.split_at(20);
        append(&trace, head);
        assert_eq!(inputs.take("a").as_deref(), Some(r#"{"path":"first"}"#));
        assert_eq!(inputs.take("a"), None, "given once");
        assert_eq!(inputs.take("b"), None, "its line is not whole yet");
        append(&trace, rest);
        // A line that only mentions the event, and one that is not JSON, name no call.
        append(
            &trace,
            "{\"event_type\":\"inference\",\"note\":\"\\\"tool_call_started\\\"\",\"tool_call_id\":\"c\"}\n",
        );
        append(&trace, "\"tool_call_started\" c\n");
        let long = "x".repeat(2 * SHOWN);
        append(&trace, &started("d", &long));
        assert_eq!(inputs.take("c"), None);
        assert_eq!(inputs.take("b").as_deref(), Some(r#"{"path":"second"}"#));
        let shown = inputs.take("d").expect("d");
        assert_eq!(shown.chars().count(), SHOWN + 1, "cut to {SHOWN} characters and `…`");
        assert!(shown.ends_with('…') && shown.starts_with(r#"{"path":"xxx"#));
        // Only what was added is read: the file's position is at its end.
        let mut file = inputs.file.take().expect("open");
        let len = std::fs::metadata(&trace).expect("metadata").len();
        assert_eq!(file.stream_position().expect("position"), len);
    }

    #[test]
    fn a_long_trace_is_read_from_its_last_64_kib_and_an_endless_line_is_dropped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let trace = dir.path().join("trace.jsonl");
        let filler = format!("{}\n", serde_json::json!({"event_type": "inference", "pad": "x".repeat(1000)}));
        let mut text = started("early", "first");
        for _ in 0..(2 * FIRST_READ as usize / filler.len()) {
            text.push_str(&filler);
        }
        text.push_str(&started("late", "second"));
        std::fs::write(&trace, &text).expect("write");
        let mut inputs = CallInputs::new(trace.clone());
        assert_eq!(inputs.take("late").as_deref(), Some(r#"{"path":"second"}"#));
        assert_eq!(inputs.take("early"), None, "before the last {FIRST_READ} bytes");
        // A line that never ends is not kept whole: past the limit it is dropped, and the lines
        // after its end are read again.
        append(&trace, &"y".repeat(LONGEST_LINE + 1));
        assert_eq!(inputs.take("z"), None);
        assert!(inputs.partial.is_empty() && inputs.skipping);
        // More of it, still without its end: none of it is kept either.
        append(&trace, &"y".repeat(10));
        assert_eq!(inputs.take("z"), None);
        assert!(inputs.partial.is_empty() && inputs.skipping);
        // Its end: a call named on it is not read, and the lines after it are.
        append(&trace, &started("inside", "the long line"));
        assert_eq!(inputs.take("inside"), None, "named on the dropped line");
        assert!(inputs.partial.is_empty() && !inputs.skipping);
        append(&trace, &started("after", "third"));
        assert_eq!(inputs.take("after").as_deref(), Some(r#"{"path":"third"}"#));
    }

    #[test]
    fn calls_whose_input_is_never_taken_are_forgotten_oldest_first() {
        let dir = tempfile::tempdir().expect("tempdir");
        let trace = dir.path().join("trace.jsonl");
        let text: String = (0..=PENDING).map(|i| started(&format!("c{i}"), "p")).collect();
        std::fs::write(&trace, text).expect("write");
        let mut inputs = CallInputs::new(trace);
        assert_eq!(inputs.take(&format!("c{PENDING}")).as_deref(), Some(r#"{"path":"p"}"#));
        assert_eq!(inputs.take("c0"), None, "the oldest was forgotten");
        assert!(inputs.take("c1").is_some());
    }
}
