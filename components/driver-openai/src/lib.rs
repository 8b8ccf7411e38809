//! `driver-openai`: a Murmur inference driver for OpenAI Chat Completions
//! and the OpenAI-compatible servers (vLLM, llama.cpp, Ollama, …).
//!
//! One `run` call is one inference call. `tool-input.data` holds the
//! runtime's neutral request (CONTRACT §3); the driver translates it
//! ([`request`]), POSTs it to `{MURMUR_INFERENCE_ENDPOINT}/chat/completions`
//! with `stream: true`, parses the server-sent events as the bytes arrive
//! (both in [`guest_http::exchange`]), reports live progress through
//! `murmur:stream/events` and builds the neutral response ([`assemble`],
//! [`calls`]). A server that
//! answers `application/json` instead of a stream is read as one whole
//! `chat.completion`, with the same events for what it contains.
//!
//! The endpoint is used as given, minus trailing slashes: it carries its own
//! version path (`https://api.openai.com/v1`, `http://127.0.0.1:11434/v1`),
//! so nothing but `/chat/completions` is appended.
//!
//! Result: `passed` with the neutral response in `data`; `failed` when the
//! call failed (HTTP status, transport, stream or protocol error), with the
//! message in `summary` and in `data.error`, `stop_reason: "error"` and any
//! content received before the failure; `error` when the input itself or the
//! driver environment is unusable (nothing was sent).
//!
//! Deliberately not done: no credential handling at all (no auth header; the
//! host gateway adds the credential, and a keyless local server needs none),
//! no provider-side conversation state (so no `continuation_id` is returned),
//! no retries. Nothing here panics: every failure becomes a result.

mod assemble;
mod calls;
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

const HEADERS: [(&str, &str); 2] = [("content-type", "application/json"), ("accept", "text/event-stream")];

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

/// Everything that can go wrong before a request is sent. The endpoint
/// carries its own version path (usually ending in `/v1`); nothing but
/// `/chat/completions` is appended. The message list is written in the pass
/// that reads it when it is in the runtime's form ([`request::fast`]).
fn prepare(data: Option<&str>) -> Result<(Target, Vec<u8>), String> {
    let parse = |data| Input::parse_with(data, request::fast::messages);
    guest_http::input::prepare_with(data, parse, request::translate, "/chat/completions")
}

/// The Chat Completions answer: `data:` payloads (event names are ignored,
/// these streams carry none), or one whole `chat.completion`.
impl<S: Sink> Answer for Assembler<S> {
    fn fail(&mut self, message: String) {
        Assembler::fail(self, message);
    }
    fn is_finished(&self) -> bool {
        Assembler::is_finished(self)
    }
    fn event(&mut self, event: &sse::Event) {
        self.data(&event.data);
    }
    fn whole(&mut self, body: &Value) {
        self.completion(body);
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
    use assemble::tests::Record;
    use exchange::feed;
    use serde_json::json;

    /// Reasoning, multi-byte text and two interleaved tool calls, then a
    /// usage-only chunk; `\r\n` and `\n` line ends, `data:` with and without
    /// a space, a comment line.
    const BODY: &str = ": keep-alive\r\n\r\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"pla\u{f1}\"}}]}\r\n\r\n\
        data:{\"choices\":[{\"index\":0,\"delta\":{\"content\":\"h\u{e9}llo \u{1F600}\"}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"id\":\"call_1\",\"type\":\"function\",\"function\":{\"name\":\"files\",\"arguments\":\"\"}}]}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"id\":\"call_2\",\"type\":\"function\",\"function\":{\"name\":\"grep\",\"arguments\":\"{\\\"q\\\"\"}}]}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,\"function\":{\"arguments\":\"{\\\"op\\\":\\\"l\u{ee}st\\\"}\"}}]}}]}\n\n\
        data: {\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":1,\"function\":{\"arguments\":\":1}\"}}]},\"finish_reason\":\"tool_calls\"}]}\n\n\
        data: {\"choices\":[],\"usage\":{\"prompt_tokens\":3,\"completion_tokens\":5,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n\
        data: [DONE]\n\n";

    fn run_split(body: &[u8], at: usize) -> (Outcome, Vec<String>) {
        let mut rec = Record::default();
        let mut parser = sse::Parser::new();
        let mut assembler = Assembler::new(&mut rec);
        if !feed(&mut parser, &mut assembler, Some(&body[..at]))
            && !feed(&mut parser, &mut assembler, Some(&body[at..]))
        {
            feed(&mut parser, &mut assembler, None);
        }
        let out = assembler.finish();
        (out, rec.0)
    }

    #[test]
    fn a_body_split_anywhere_gives_the_same_response_and_events() {
        let body = BODY.as_bytes();
        for at in 0..=body.len() {
            let (out, events) = run_split(body, at);
            assert_eq!(out.error, None, "split at {at}");
            assert_eq!(
                out.response,
                json!({"stop_reason": "tool_call", "content": [
                    {"type": "thinking", "text": "pla\u{f1}", "signature": ""},
                    {"type": "text", "text": "h\u{e9}llo \u{1F600}"},
                    {"type": "tool_call", "id": "call_1", "name": "files", "input": {"op": "l\u{ee}st"}},
                    {"type": "tool_call", "id": "call_2", "name": "grep", "input": {"q": 1}}],
                    "usage": {"input_tokens": 3, "output_tokens": 5, "cached_tokens": 0}}),
                "split at {at}"
            );
            assert_eq!(
                events,
                [
                    "thinking pla\u{f1}",
                    "text h\u{e9}llo \u{1F600}",
                    "start call_1 files",
                    "bytes call_1 0",
                    "start call_2 grep",
                    "bytes call_2 4",
                    "bytes call_1 14",
                    "bytes call_2 7"
                ],
                "split at {at}"
            );
        }
    }

    #[test]
    fn a_body_cut_short_or_not_utf8_fails() {
        let body = BODY.as_bytes();
        let cut = &body[..body.len() - "data: [DONE]\n\n".len()];
        for at in [0, 10, cut.len()] {
            let (out, _) = run_split(cut, at);
            assert_eq!(out.error.as_deref(), Some("stream ended before [DONE]"));
            assert_eq!(out.response["stop_reason"], "error");
            assert_eq!(out.response["content"][1]["text"], "h\u{e9}llo \u{1F600}");
        }
        let mut bad = body.to_vec();
        bad.insert(40, 0xff);
        assert_eq!(run_split(&bad, 5).0.error.as_deref(), Some("the response body is not valid UTF-8"));
    }

    #[test]
    fn input_errors_are_status_error() {
        for data in [None, Some(""), Some("{"), Some("{\"model\":\"m\"}")] {
            let err = prepare(data).err().unwrap_or_default();
            assert!(!err.is_empty(), "{data:?}");
            let r = result(shape::input_error(err.clone()));
            assert!(matches!(r.status, Status::Error));
            let v: Value = serde_json::from_str(r.data.as_deref().unwrap_or("")).unwrap_or_default();
            assert_eq!(v, json!({"stop_reason": "error", "content": [], "error": err}));
        }
    }
}
