//! Incremental Server-Sent Events parser.
//!
//! Bytes go in as they arrive from the network, in whatever pieces the
//! transport hands over; complete events come out. The parser buffers
//! *bytes*, never strings, so an event, a line or even a multi-byte UTF-8
//! character split across two reads is reassembled before it is decoded.
//!
//! Follows the WHATWG event-stream rules that matter for an API client:
//! lines end with `\r\n`, `\n` or `\r`; a leading byte-order mark is dropped;
//! `:` starts a comment; `field: value` loses exactly one space after the
//! colon (so `data:x` and `data: x` are the same); several `data` lines are
//! joined with `\n`; a blank line dispatches the event; an event with no
//! `data` line is not dispatched.
//!
//! Deliberately not done: `id` and `retry` are ignored (this client never
//! reconnects), and an event left unterminated when the stream ends is
//! discarded, as the standard says, so a truncated stream looks truncated.

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Event {
    /// The `event:` field, empty when the server sent none.
    pub name: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// A line that is not valid UTF-8.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotUtf8;

/// Parser state: the unfinished line plus the event being built.
#[derive(Debug, Default)]
pub struct Parser {
    /// Bytes received but not yet ended by a line terminator.
    pending: Vec<u8>,
    /// Whether the very first line has been seen (for the BOM rule).
    started: bool,
    /// The event being built; handed out by reference when dispatched, then emptied (its
    /// strings keep their room for the next one).
    event: Event,
    has_data: bool,
}

/// What the caller says after each event: `true` to go on, `false` to stop reading.
pub type Each<'e> = &'e mut dyn FnMut(&Event) -> bool;

impl Parser {
    pub fn new() -> Self {
        Self::default()
    }

    /// Feed the next bytes of the stream; returns every event they complete.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<Event>, NotUtf8> {
        let mut events = Vec::new();
        self.push_each(bytes, &mut |e| {
            events.push(e.clone());
            true
        })?;
        Ok(events)
    }

    /// Feed the next bytes of the stream; `each` gets every event they complete, in order,
    /// until it says to stop (the rest of these bytes is then left unread).
    pub fn push_each(&mut self, bytes: &[u8], each: Each) -> Result<(), NotUtf8> {
        // The buffer is taken out while its lines are read (they borrow it), and what is left
        // of it goes back: no line is copied.
        let mut pending = std::mem::take(&mut self.pending);
        pending.extend_from_slice(bytes);
        let mut start = 0;
        let outcome = loop {
            let Some(i) = line_break(&pending, start) else { break Ok(()) };
            let end_len = match pending[i] {
                b'\n' => 1,
                _ => match pending.get(i + 1) {
                    Some(b'\n') => 2,
                    Some(_) => 1,
                    // A `\r` as the last byte may be the first half of `\r\n`:
                    // wait for the next read to decide.
                    None => break Ok(()),
                },
            };
            let line = self.line(&pending[start..i], each);
            start = i + end_len;
            match line {
                Ok(true) => {}
                Ok(false) => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        pending.drain(..start);
        self.pending = pending;
        outcome
    }

    /// The stream has ended. A `\r` held back as possibly half of `\r\n`
    /// ends its line after all; anything else unterminated is discarded, and
    /// so is an event still waiting for its closing blank line.
    pub fn finish(&mut self) -> Result<Vec<Event>, NotUtf8> {
        let mut events = Vec::new();
        self.finish_each(&mut |e| {
            events.push(e.clone());
            true
        })?;
        Ok(events)
    }

    /// [`Parser::finish`], each event to `each`.
    pub fn finish_each(&mut self, each: Each) -> Result<(), NotUtf8> {
        let rest = std::mem::take(&mut self.pending);
        if let Some(line) = rest.strip_suffix(b"\r") {
            self.line(line, each)?;
        }
        self.reset_event();
        Ok(())
    }

    /// One line; whether to go on.
    fn line(&mut self, raw: &[u8], each: Each) -> Result<bool, NotUtf8> {
        let mut raw = raw;
        if !self.started {
            self.started = true;
            raw = raw.strip_prefix("\u{feff}".as_bytes()).unwrap_or(raw);
        }
        let line = std::str::from_utf8(raw).map_err(|_| NotUtf8)?;
        if line.is_empty() {
            let mut go_on = true;
            if self.has_data {
                self.event.data.pop(); // the `\n` after the last data line
                go_on = each(&self.event);
            }
            self.reset_event();
            return Ok(go_on);
        }
        if line.starts_with(':') {
            return Ok(true);
        }
        let (field, value) = match line.bytes().position(|b| b == b':') {
            Some(colon) => {
                let value = &line[colon + 1..];
                (&line[..colon], value.strip_prefix(' ').unwrap_or(value))
            }
            None => (line, ""),
        };
        match field {
            "event" => {
                self.event.name.clear();
                self.event.name.push_str(value);
            }
            "data" => {
                self.event.data.push_str(value);
                self.event.data.push('\n');
                self.has_data = true;
            }
            _ => {}
        }
        Ok(true)
    }

    fn reset_event(&mut self) {
        self.event.name.clear();
        self.event.data.clear();
        self.has_data = false;
    }
}

/// The index of the first `\n` or `\r` at or after `from`. Eight bytes at a time: a byte is
/// flagged by the usual zero-byte test, and the lowest flag is always a true match (a borrow
/// only runs upward, from a byte that is itself a match).
fn line_break(bytes: &[u8], mut from: usize) -> Option<usize> {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    while let Some(chunk) = bytes.get(from..from + 8) {
        let v = u64::from_le_bytes(chunk.try_into().unwrap_or_default());
        let flags = zero(v ^ (ONES * u64::from(b'\n'))) | zero(v ^ (ONES * u64::from(b'\r')));
        if flags != 0 {
            return Some(from + (flags.trailing_zeros() / 8) as usize);
        }
        from += 8;
    }
    bytes.get(from..)?.iter().position(|&b| b == b'\n' || b == b'\r').map(|at| from + at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ev(name: &str, data: &str) -> Event {
        Event { name: name.to_string(), data: data.to_string() }
    }

    /// Feed `input` split at every possible pair of points.
    fn all_splits(input: &[u8]) -> Vec<Vec<Event>> {
        let mut out = Vec::new();
        for a in 0..=input.len() {
            for b in a..=input.len() {
                let mut p = Parser::new();
                let mut got = Vec::new();
                got.extend(p.push(&input[..a]).unwrap());
                got.extend(p.push(&input[a..b]).unwrap());
                got.extend(p.push(&input[b..]).unwrap());
                got.extend(p.finish().unwrap());
                out.push(got);
            }
        }
        out
    }

    #[test]
    fn line_breaks_are_found_as_a_byte_by_byte_search_finds_them() {
        // Bytes next to `\n` and `\r` in value, with the high bit set, and zero.
        let alphabet = [b'\n', b'\r', b'a', 0x8a, 0x8d, 0x00, 0x0b, 0x0c, 0x09, 0xff, 0x0e];
        let mut seed: u64 = 0x853c_49e6_748f_ea9b;
        for _ in 0..4000 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let len = (seed % 41) as usize;
            let bytes: Vec<u8> =
                (0..len).map(|i| alphabet[((seed >> (i % 60)) as usize + i * 7) % alphabet.len()]).collect();
            for from in 0..=len + 1 {
                let naive = bytes
                    .get(from..)
                    .and_then(|rest| rest.iter().position(|&b| b == b'\n' || b == b'\r'))
                    .map(|at| from + at);
                assert_eq!(line_break(&bytes, from), naive, "{bytes:?} from {from}");
            }
        }
    }

    #[test]
    fn line_endings_spaces_comments_and_multiline_data() {
        let input = "\u{feff}: hello\r\nevent: a\r\ndata:{\"x\":1}\r\n\r\nevent:b\ndata: one\ndata:two\n\n\
                     event: c\rdata: é✓\r\r";
        for got in all_splits(input.as_bytes()) {
            assert_eq!(got, vec![ev("a", "{\"x\":1}"), ev("b", "one\ntwo"), ev("c", "é✓")]);
        }
    }

    #[test]
    fn event_without_data_is_not_dispatched_and_unterminated_is_dropped() {
        let mut p = Parser::new();
        assert!(p.push(b"event: ping\n\nevent: x\ndata: 1\n").unwrap().is_empty());
        assert!(p.finish().unwrap().is_empty());
    }

    #[test]
    fn invalid_utf8_is_an_error() {
        let mut p = Parser::new();
        assert_eq!(p.push(b"data: \xff\n\n"), Err(NotUtf8));
    }

    #[test]
    fn empty_data_line_dispatches_empty_data() {
        let mut p = Parser::new();
        assert_eq!(p.push(b"data\n\n").unwrap(), vec![ev("", "")]);
    }
}
