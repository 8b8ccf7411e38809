//! `driver-anthropic`: a Murmur inference driver for the Anthropic Messages API.
//!
//! One `run` call is one inference call. `tool-input.data` holds the
//! runtime's neutral request (CONTRACT §3); the driver translates it
//! ([`request`]), POSTs it to `{MURMUR_INFERENCE_ENDPOINT}/v1/messages` with
//! `stream: true`, parses the server-sent events as the bytes arrive (both
//! in [`guest_http::exchange`]), reports live progress through
//! `murmur:stream/events` and builds the neutral response ([`assemble`]).
//!
//! Result: `passed` with the neutral response in `data`; `failed` when the
//! call failed (HTTP status, transport, stream or protocol error), with the
//! message in `summary` and in `data.error`, `stop_reason: "error"` and any
//! content received before the failure; `error` when the input itself or the
//! driver environment is unusable (nothing was sent).
//!
//! Deliberately not done: no credential handling at all (the host gateway
//! adds it to the request), no provider-side conversation state (so no
//! `continuation_id` is returned), no retries. Nothing here panics: every
//! failure becomes a result.

mod assemble;
mod request;

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/driver@0.1.0",
    generate_all,
});

use assemble::{Assembler, Outcome, Sink};
use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use guest_http::exchange::{self, Answer};
use guest_http::neutral::Input;
use guest_http::shape::{self, Shaped, Verdict};
use guest_http::{sse, target::Target};
use murmur::stream::events;
use serde_json::Value;

const HEADERS: [(&str, &str); 3] =
    [("content-type", "application/json"), ("anthropic-version", "2023-06-01"), ("accept", "text/event-stream")];

struct Component;

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        match prepare(input.data.as_deref()) {
            Ok((target, body)) => {
                let mut assembler = Assembler::new(HostEvents);
                exchange::call(&target, &HEADERS, &body, &mut assembler);
                let Outcome { response, error } = assembler.finish();
                result(shape::outcome(&response, error))
            }
            Err(message) => result(shape::input_error(message)),
        }
    }
}

export!(Component);

/// Everything that can go wrong before a request is sent. The message list is written in
/// the pass that reads it when it is in the runtime's form ([`request::fast`]).
fn prepare(data: Option<&str>) -> Result<(Target, Vec<u8>), String> {
    let parse = |data| Input::parse_with(data, request::fast::messages);
    guest_http::input::prepare_with(data, parse, request::translate, "/v1/messages")
}

/// The Messages API's answer: named streaming events, or one whole message.
impl<S: Sink> Answer for Assembler<S> {
    fn fail(&mut self, message: String) {
        Assembler::fail(self, message);
    }
    fn is_finished(&self) -> bool {
        Assembler::is_finished(self)
    }
    fn event(&mut self, event: &sse::Event) {
        Assembler::event(self, &event.name, &event.data);
    }
    fn whole(&mut self, body: &Value) {
        self.message(body);
    }
}

/// Live events go to the host's `murmur:stream/events`.
struct HostEvents;

impl Sink for HostEvents {
    fn text(&mut self, chunk: &str) {
        events::emit_chunk(chunk);
    }
    fn thinking(&mut self, chunk: &str) {
        events::emit_thinking_chunk(chunk);
    }
    fn tool_started(&mut self, id: &str, name: &str) {
        events::tool_call_started(id, name);
    }
    fn tool_bytes(&mut self, id: &str, bytes: u64) {
        events::tool_call_input_bytes(id, bytes);
    }
}

fn result(shaped: Shaped) -> ToolResult {
    let status = match shaped.status {
        Verdict::Passed => Status::Passed,
        Verdict::Failed => Status::Failed,
        Verdict::Error => Status::Error,
    };
    ToolResult {
        status,
        summary: shaped.summary,
        data: Some(shaped.data),
        data_path: None,
        truncated: false,
        metadata: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use exchange::feed;
    use serde_json::json;

    struct Quiet;

    impl Sink for Quiet {
        fn text(&mut self, _: &str) {}
        fn thinking(&mut self, _: &str) {}
        fn tool_started(&mut self, _: &str, _: &str) {}
        fn tool_bytes(&mut self, _: &str, _: u64) {}
    }

    const BODY: &str = "event: message_start\r\ndata: {\"type\":\"message_start\",\"message\":{\"usage\":{\"input_tokens\":3,\"output_tokens\":1}}}\r\n\r\n\
        : keep-alive\n\
        event: content_block_start\ndata:{\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\",\"text\":\"\"}}\n\n\
        event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\",\"text\":\"h\u{e9}llo \u{1F600}\"}}\n\n\
        event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":0}\n\n\
        event: message_delta\ndata: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"end_turn\"},\"usage\":{\"output_tokens\":5}}\n\n\
        event: message_stop\ndata: {\"type\":\"message_stop\"}\n\n";

    fn run_split(body: &[u8], at: usize) -> Outcome {
        let mut parser = sse::Parser::new();
        let mut assembler = Assembler::new(Quiet);
        if !feed(&mut parser, &mut assembler, Some(&body[..at]))
            && !feed(&mut parser, &mut assembler, Some(&body[at..]))
        {
            feed(&mut parser, &mut assembler, None);
        }
        assembler.finish()
    }

    #[test]
    fn a_body_split_anywhere_gives_the_same_response() {
        let body = BODY.as_bytes();
        for at in 0..=body.len() {
            let out = run_split(body, at);
            assert_eq!(out.error, None, "split at {at}");
            assert_eq!(
                out.response,
                json!({"stop_reason": "end_turn", "content": [{"type": "text", "text": "h\u{e9}llo \u{1F600}"}],
                       "usage": {"input_tokens": 3, "output_tokens": 5}})
            );
        }
    }

    #[test]
    fn a_body_cut_short_or_not_utf8_fails() {
        let body = BODY.as_bytes();
        let out = run_split(&body[..body.len() - 30], 10);
        assert_eq!(out.error.as_deref(), Some("stream ended before message_stop"));
        assert_eq!(out.response["content"][0]["text"], "h\u{e9}llo \u{1F600}");
        let mut bad = body.to_vec();
        bad.insert(30, 0xff);
        assert_eq!(run_split(&bad, 5).error.as_deref(), Some("the response body is not valid UTF-8"));
    }
}
