//! `driver-anthropic`: a Murmur inference driver for the Anthropic Messages API.
//!
//! One `run` call is one inference call. `tool-input.data` holds the
//! runtime's neutral request (CONTRACT §3); the driver translates it
//! ([`request`]), POSTs it to `{MURMUR_INFERENCE_ENDPOINT}/v1/messages` with
//! `stream: true` ([`http`]), parses the server-sent events as the bytes
//! arrive ([`sse`]), reports live progress through `murmur:stream/events` and
//! builds the neutral response ([`assemble`]).
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
mod http;
mod request;
mod sse;

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/driver@0.1.0",
    generate_all,
});

use assemble::{Assembler, Outcome, Sink};
use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use murmur::stream::events;
use serde_json::{Value, json};

/// An error body longer than this is cut in the error message.
const ERROR_BODY_CAP: usize = 16 * 1024;
/// A non-streaming response larger than this is refused.
const JSON_BODY_CAP: usize = 64 * 1024 * 1024;

const HEADERS: [(&str, &str); 3] = [
    ("content-type", "application/json"),
    ("anthropic-version", "2023-06-01"),
    ("accept", "text/event-stream"),
];

struct Component;

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        match prepare(input.data.as_deref()) {
            Ok((target, body)) => {
                let mut assembler = Assembler::new(HostEvents);
                call(&target, &body, &mut assembler);
                outcome_result(assembler.finish())
            }
            Err(message) => input_error(message),
        }
    }
}

export!(Component);

/// Everything that can go wrong before a request is sent.
fn prepare(data: Option<&str>) -> Result<(http::Target, Vec<u8>), String> {
    let data = data
        .filter(|d| !d.trim().is_empty())
        .ok_or("no input: tool-input.data must hold the neutral inference request JSON")?;
    let req: Value = serde_json::from_str(data).map_err(|e| format!("input is not valid JSON: {e}"))?;
    let body = request::translate(&req).map_err(|e| format!("invalid inference request: {e}"))?;
    let endpoint = std::env::var("MURMUR_INFERENCE_ENDPOINT")
        .map_err(|e| format!("MURMUR_INFERENCE_ENDPOINT is unusable: {e}"))?;
    let target = http::messages_target(&endpoint)?;
    let body = serde_json::to_vec(&body).map_err(|e| format!("cannot serialise the request: {e}"))?;
    Ok((target, body))
}

/// Send the request and feed the answer to the assembler; failures go to it too.
fn call<S: Sink>(target: &http::Target, body: &[u8], assembler: &mut Assembler<S>) {
    let mut response = match http::post(target, &HEADERS, body) {
        Ok(r) => r,
        Err(e) => return assembler.fail(e),
    };
    if !(200..300).contains(&response.status) {
        let text = match response.body.read_to_end(ERROR_BODY_CAP) {
            Ok((bytes, cut)) => {
                let text = String::from_utf8_lossy(&bytes).into_owned();
                if cut { format!("{text}… (cut)") } else { text }
            }
            Err(e) => format!("(body unreadable: {e})"),
        };
        return assembler.fail(format!("HTTP {}: {}", response.status, text));
    }
    if response.content_type.starts_with("application/json") {
        return whole_json(&mut response.body, assembler);
    }
    let mut parser = sse::Parser::new();
    loop {
        let done = match response.body.read() {
            Ok(Some(bytes)) => feed(&mut parser, assembler, Some(&bytes)),
            Ok(None) => feed(&mut parser, assembler, None),
            Err(e) => return assembler.fail(e),
        };
        if done {
            return;
        }
    }
}

/// Hand one read of the SSE body (`None`: the body ended) to the parser and
/// the events it completes to the assembler. True when nothing more is needed.
fn feed<S: Sink>(parser: &mut sse::Parser, assembler: &mut Assembler<S>, read: Option<&[u8]>) -> bool {
    let events = match read {
        Some(bytes) => parser.push(bytes),
        None => parser.finish(),
    };
    let Ok(events) = events else {
        assembler.fail("the response body is not valid UTF-8");
        return true;
    };
    for event in events {
        assembler.event(&event.name, &event.data);
        if assembler.is_finished() {
            return true;
        }
    }
    read.is_none()
}

/// A non-streaming (`application/json`) Messages response.
fn whole_json<S: Sink>(body: &mut http::Body, assembler: &mut Assembler<S>) {
    let bytes = match body.read_to_end(JSON_BODY_CAP) {
        Ok((_, true)) => return assembler.fail(format!("the response body is larger than {JSON_BODY_CAP} bytes")),
        Ok((bytes, false)) => bytes,
        Err(e) => return assembler.fail(e),
    };
    let Ok(text) = String::from_utf8(bytes) else {
        return assembler.fail("the response body is not valid UTF-8");
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(value) => assembler.message(&value),
        Err(e) => assembler.fail(format!("the response body is not valid JSON: {e}")),
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

fn outcome_result(outcome: Outcome) -> ToolResult {
    let data = Some(outcome.response.to_string());
    match outcome.error {
        None => result(Status::Passed, None, data),
        Some(message) => result(Status::Failed, Some(message), data),
    }
}

/// The input or environment is unusable: nothing was sent.
fn input_error(message: String) -> ToolResult {
    let data = json!({"stop_reason": "error", "content": [], "error": message}).to_string();
    result(Status::Error, Some(message), Some(data))
}

fn result(status: Status, summary: Option<String>, data: Option<String>) -> ToolResult {
    ToolResult { status, summary, data, data_path: None, truncated: false, metadata: Vec::new() }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        if !feed(&mut parser, &mut assembler, Some(&body[..at])) && !feed(&mut parser, &mut assembler, Some(&body[at..])) {
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
