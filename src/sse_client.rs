//! An incremental reader of `text/event-stream` bodies: feed it the body's bytes as they arrive,
//! in pieces of any size, and it hands back each event once its blank line has arrived.
//!
//! Guarantees: the events are the same however the bytes are cut (a piece may end inside a
//! line, inside a field name or inside a multi-byte UTF-8 character); nothing is returned for
//! an event whose blank line has not arrived, so a connection that drops mid-event yields no
//! partial event ([`SseParser::has_partial`] tells whether something was left over). Lines end
//! in `\n` (a `\r` before it is dropped, so `\r\n` works too). Comment lines (`:heartbeat`) are
//! skipped; `data:` lines are joined with `\n`; one space after a field's colon is removed.
//!
//! Deliberately different from a browser's `EventSource`: [`SseEvent::id`] is the event's own
//! `id:` line, not a last-event-id that carries over to later events, because the door gives
//! per-connection frames (`connection-ack`, `gap`, `capsule-closed`) no id and a reader must see
//! that. An event with no `data:` line is still returned (with empty data). Lone `\r` line ends
//! and the `retry:` field are not supported (the door sends neither).

/// One event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// The event's own `id:` value, if it had one.
    pub id: Option<String>,
    /// The `event:` value (`message` when the event named none).
    pub event: String,
    /// The `data:` lines joined with `\n`.
    pub data: String,
}

/// The parser's state between pieces of a body.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of the current, unfinished line.
    line: Vec<u8>,
    /// The event being built, and whether any field of it has been seen.
    current: Option<Fields>,
}

#[derive(Debug, Default)]
struct Fields {
    id: Option<String>,
    event: Option<String>,
    data: Option<String>,
}

impl SseParser {
    /// A parser at the start of a body.
    pub fn new() -> Self {
        Self::default()
    }

    /// Take the next piece of the body; returns the events it completed, in order.
    pub fn push(&mut self, bytes: &[u8]) -> Vec<SseEvent> {
        let mut out = Vec::new();
        let mut rest = bytes;
        while let Some(end) = rest.iter().position(|b| *b == b'\n') {
            self.line.extend_from_slice(&rest[..end]);
            rest = &rest[end + 1..];
            let mut line = std::mem::take(&mut self.line);
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if let Some(event) = self.line_done(&line) {
                out.push(event);
            }
        }
        self.line.extend_from_slice(rest);
        out
    }

    /// Whether bytes of an unfinished event are held (the body ended or dropped mid-event).
    pub fn has_partial(&self) -> bool {
        !self.line.is_empty() || self.current.is_some()
    }

    fn line_done(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            let f = self.current.take()?;
            return Some(SseEvent {
                id: f.id,
                event: f.event.unwrap_or_else(|| "message".to_string()),
                data: f.data.unwrap_or_default(),
            });
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (name, value) = match line.split_once(':') {
            Some((name, value)) => (name, value.strip_prefix(' ').unwrap_or(value)),
            None => (&*line, ""),
        };
        let f = self.current.get_or_insert_with(Fields::default);
        match name {
            "id" => f.id = Some(value.to_string()),
            "event" => f.event = Some(value.to_string()),
            "data" => match &mut f.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => f.data = Some(value.to_string()),
            },
            _ => {} // unknown fields (and `retry`) are ignored
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BODY: &str = "event: connection-ack\ndata: {\"role\":\"observer\"}\n\n\
        :heartbeat\n\n\
        id: 1\nevent: text\ndata: {\"text\":\"h\u{e9}llo \u{1F600}\"}\n\n\
        id: 2\r\nevent: status\r\ndata: {\"final\":true}\r\n\r\n";

    fn expected() -> Vec<SseEvent> {
        vec![
            SseEvent { id: None, event: "connection-ack".into(), data: "{\"role\":\"observer\"}".into() },
            SseEvent { id: Some("1".into()), event: "text".into(), data: "{\"text\":\"h\u{e9}llo \u{1F600}\"}".into() },
            SseEvent { id: Some("2".into()), event: "status".into(), data: "{\"final\":true}".into() },
        ]
    }

    #[test]
    fn one_piece_gives_every_event_with_its_own_id_and_skips_comments() {
        let mut p = SseParser::new();
        assert_eq!(p.push(BODY.as_bytes()), expected());
        assert!(!p.has_partial());
    }

    #[test]
    fn a_body_cut_at_any_byte_gives_the_same_events() {
        let body = BODY.as_bytes();
        for at in 0..=body.len() {
            let mut p = SseParser::new();
            let mut got = p.push(&body[..at]);
            got.extend(p.push(&body[at..]));
            assert_eq!(got, expected(), "cut at byte {at}");
        }
    }

    #[test]
    fn a_body_fed_one_byte_at_a_time_gives_the_same_events() {
        let mut p = SseParser::new();
        let got: Vec<SseEvent> = BODY.as_bytes().iter().flat_map(|b| p.push(std::slice::from_ref(b))).collect();
        assert_eq!(got, expected());
    }

    #[test]
    fn an_event_cut_before_its_blank_line_is_held_not_returned() {
        let mut p = SseParser::new();
        assert!(p.push(b"id: 7\nevent: text\ndata: {}\n").is_empty());
        assert!(p.has_partial());
        let mut p = SseParser::new();
        assert!(p.push(b"id: 7\nevent: te").is_empty());
        assert!(p.has_partial(), "half a line is held too");
    }

    #[test]
    fn data_lines_join_with_newlines_and_one_space_after_the_colon_is_removed() {
        let mut p = SseParser::new();
        let got = p.push(b"data:a\ndata:  b\ndata\nfoo: ignored\n\n");
        assert_eq!(got, vec![SseEvent { id: None, event: "message".into(), data: "a\n b\n".into() }]);
    }

    #[test]
    fn blank_lines_with_no_event_before_them_yield_nothing() {
        let mut p = SseParser::new();
        assert!(p.push(b"\n\n:comment\n\n\n").is_empty());
        assert!(!p.has_partial());
    }
}
