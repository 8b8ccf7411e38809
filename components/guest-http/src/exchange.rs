//! One streaming inference call, from the POST to the last event: the
//! control flow `driver-anthropic` and `driver-openai` share.
//!
//! [`call`] POSTs the request ([`crate::http`]) and hands what comes back to
//! an [`Answer`] (a driver's response assembler):
//!
//! - a status outside 200–299 fails with `HTTP <status>: <body>`, the body
//!   read up to [`ERROR_BODY_CAP`] bytes, decoded lossily, and marked
//!   `… (cut)` when there was more (or `(body unreadable: …)`);
//! - an `application/json` answer is read whole (at most [`JSON_BODY_CAP`]
//!   bytes) and given to [`Answer::whole`];
//! - anything else is parsed as server-sent events ([`crate::sse`]) as the
//!   bytes arrive, each complete event given to [`Answer::event`], until the
//!   answer says it is finished or the body ends.
//!
//! Guarantees: every failure goes to [`Answer::fail`], with the messages
//! `the response body is not valid UTF-8`, `the response body is not valid
//! JSON: …`, `the response body is larger than 67108864 bytes` or the
//! transport's own; nothing panics and nothing is returned. Reading stops as
//! soon as the answer is finished, so trailing bytes are never waited for.
//!
//! Deliberately not done: what an event or a whole body means (that is the
//! answer's business, per provider), retries, reconnects.

use serde_json::Value;

use crate::http::{self, Body};
use crate::sse;
use crate::target::Target;

/// An error body longer than this is cut in the error message.
pub const ERROR_BODY_CAP: usize = 16 * 1024;
/// A non-streaming response larger than this is refused.
pub const JSON_BODY_CAP: usize = 64 * 1024 * 1024;

/// What a driver does with the provider's answer.
pub trait Answer {
    /// The call failed; the first failure is the one that counts.
    fn fail(&mut self, message: String);
    /// Nothing more is needed (the final event arrived, or it failed).
    fn is_finished(&self) -> bool;
    /// One complete server-sent event.
    fn event(&mut self, event: &sse::Event);
    /// A whole non-streaming (`application/json`) response body.
    fn whole(&mut self, body: &Value);
}

/// Send the request and feed the answer; failures go to it too.
pub fn call<A: Answer>(target: &Target, headers: &[(&str, &str)], body: &[u8], answer: &mut A) {
    let mut response = match http::post(target, headers, body) {
        Ok(r) => r,
        Err(e) => return answer.fail(e),
    };
    if !(200..300).contains(&response.status) {
        let text = match response.body.read_to_end(ERROR_BODY_CAP) {
            Ok((bytes, cut)) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                if cut { format!("{text}… (cut)") } else { text }
            }
            Err(e) => format!("(body unreadable: {e})"),
        };
        return answer.fail(format!("HTTP {}: {}", response.status, text));
    }
    if response.content_type.starts_with("application/json") {
        return whole_json(&mut response.body, answer);
    }
    let mut parser = sse::Parser::new();
    loop {
        let done = match response.body.read() {
            Ok(Some(bytes)) => feed(&mut parser, answer, Some(&bytes)),
            Ok(None) => feed(&mut parser, answer, None),
            Err(e) => return answer.fail(e),
        };
        if done {
            return;
        }
    }
}

/// Hand one read of the SSE body (`None`: the body ended) to the parser and
/// the events it completes to the answer. True when nothing more is needed.
pub fn feed<A: Answer>(parser: &mut sse::Parser, answer: &mut A, read: Option<&[u8]>) -> bool {
    let mut finished = false;
    let mut each = |event: &sse::Event| {
        answer.event(event);
        finished = answer.is_finished();
        !finished
    };
    let parsed = match read {
        Some(bytes) => parser.push_each(bytes, &mut each),
        None => parser.finish_each(&mut each),
    };
    if parsed.is_err() {
        answer.fail("the response body is not valid UTF-8".to_string());
        return true;
    }
    finished || read.is_none()
}

/// A non-streaming (`application/json`) response.
fn whole_json<A: Answer>(body: &mut Body, answer: &mut A) {
    let bytes = match body.read_to_end(JSON_BODY_CAP) {
        Ok((_, true)) => return answer.fail(format!("the response body is larger than {JSON_BODY_CAP} bytes")),
        Ok((bytes, false)) => bytes,
        Err(e) => return answer.fail(e),
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return answer.fail("the response body is not valid UTF-8".to_string());
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(value) => answer.whole(&value),
        Err(e) => answer.fail(format!("the response body is not valid JSON: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes down what it is given; finished at an event named `stop`.
    #[derive(Default)]
    struct Log {
        got: Vec<String>,
        error: Option<String>,
        finished: bool,
    }

    impl Answer for Log {
        fn fail(&mut self, message: String) {
            if self.error.is_none() {
                self.error = Some(message);
            }
            self.finished = true;
        }
        fn is_finished(&self) -> bool {
            self.finished
        }
        fn event(&mut self, event: &sse::Event) {
            self.got.push(format!("{}={}", event.name, event.data));
            self.finished = event.name == "stop";
        }
        fn whole(&mut self, body: &Value) {
            self.got.push(body.to_string());
        }
    }

    const BODY: &str = ": hi\r\nevent: a\r\ndata: h\u{e9}llo \u{1F600}\r\n\r\ndata:x\n\nevent: stop\ndata: {}\n\nevent: late\ndata: 1\n\n";

    fn run_split(body: &[u8], at: usize) -> Log {
        let mut parser = sse::Parser::new();
        let mut log = Log::default();
        if !feed(&mut parser, &mut log, Some(&body[..at])) && !feed(&mut parser, &mut log, Some(&body[at..])) {
            feed(&mut parser, &mut log, None);
        }
        log
    }

    #[test]
    fn a_body_split_anywhere_gives_the_same_events_and_stops_when_finished() {
        let body = BODY.as_bytes();
        for at in 0..=body.len() {
            let log = run_split(body, at);
            assert_eq!(log.error, None, "split at {at}");
            assert_eq!(log.got, ["a=h\u{e9}llo \u{1F600}", "=x", "stop={}"], "split at {at}");
        }
    }

    #[test]
    fn the_end_of_the_body_flushes_and_reports_done() {
        let mut parser = sse::Parser::new();
        let mut log = Log::default();
        assert!(!feed(&mut parser, &mut log, Some(b"data: 1\n\ndata: 2\r")));
        assert_eq!(log.got, ["=1"]);
        assert!(feed(&mut parser, &mut log, None));
        assert_eq!(log.got, ["=1"], "an event without its blank line is dropped");
        assert_eq!(log.error, None);
    }

    #[test]
    fn not_utf8_fails_and_stops() {
        let mut bad = BODY.as_bytes().to_vec();
        bad.insert(30, 0xff);
        for at in [0, 5, bad.len()] {
            let log = run_split(&bad, at);
            assert_eq!(log.error.as_deref(), Some("the response body is not valid UTF-8"), "split at {at}");
        }
    }
}
