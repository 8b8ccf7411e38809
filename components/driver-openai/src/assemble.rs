//! Chat Completions response → neutral response, with live events on the way.
//!
//! An [`Assembler`] takes the `data:` payloads of a streamed response one by
//! one ([`Assembler::data`]: a `chat.completion.chunk` JSON or `[DONE]`), or
//! a whole non-streaming `chat.completion` ([`Assembler::completion`]);
//! forwards live progress to a [`Sink`] (text and reasoning chunks,
//! tool-call starts, cumulative argument bytes) and builds the neutral
//! response `{stop_reason, content, usage?, error?}` (CONTRACT §3).
//!
//! What it reads from a chunk: `choices[0].delta.content` (text);
//! `delta.reasoning_content`, or `delta.reasoning` when that is absent
//! (local servers' reasoning; one of the two, never both, since some servers
//! send the same text under both names); `delta.tool_calls[]` (see
//! [`crate::calls`]); `finish_reason`; `usage` (in any chunk, typically a
//! last one with `choices: []`; the latest wins); `error` (the call fails).
//! Unknown fields are ignored. The stream is complete only at `[DONE]`.
//!
//! Stop mapping: `tool_calls` → `tool_call`, `stop` → `end_turn`, `length` →
//! `max_tokens`, anything else (or none) → `error`. One deliberate
//! tolerance: `stop` with at least one valid tool call is `tool_call`, since
//! some local servers report `stop` for tool calls and the calls would
//! otherwise be lost; `tool_calls` with no valid call is an error.
//!
//! Content order: one `thinking` block (signature `""`), one `text` block,
//! then the tool calls in index order; empty ones are left out. Every
//! failure is recorded, never raised: the first error wins, content received
//! before it is kept, and [`Assembler::finish`] turns it into
//! `stop_reason: "error"`. Not done: `n > 1` (only choice 0 is read),
//! `logprobs`, refusals and the legacy `function_call` delta are ignored.

use crate::calls::{Calls, Piece};
use guest_http::flat::Flat;
use serde_json::{Map, Value, json};

/// Where live progress goes while a response streams in.
pub trait Sink {
    fn text(&mut self, chunk: &str);
    fn thinking(&mut self, chunk: &str);
    fn tool_started(&mut self, id: &str, name: &str);
    fn tool_bytes(&mut self, id: &str, bytes: u64);
}

/// The finished call: the neutral response and, if it failed, why.
pub struct Outcome {
    pub response: Value,
    pub error: Option<String>,
}

pub struct Assembler<S: Sink> {
    sink: S,
    thinking: String,
    text: String,
    calls: Calls,
    finish_reason: Option<String>,
    usage: Option<Value>,
    done: bool,
    error: Option<String>,
}

impl<S: Sink> Assembler<S> {
    pub fn new(sink: S) -> Self {
        Self {
            sink,
            thinking: String::new(),
            text: String::new(),
            calls: Calls::default(),
            finish_reason: None,
            usage: None,
            done: false,
            error: None,
        }
    }

    /// Record a failure; the first one wins.
    pub fn fail(&mut self, message: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(message.into());
        }
    }

    /// No further input can change the outcome (`[DONE]` or an error).
    pub fn is_finished(&self) -> bool {
        self.done || self.error.is_some()
    }

    /// Handle one SSE `data:` payload.
    pub fn data(&mut self, data: &str) {
        if self.is_finished() {
            return;
        }
        if data.trim() == "[DONE]" {
            self.done = true;
            return;
        }
        // Read as a `Flat`: the fields asked for below, as a `Value` would give them, without
        // building one.
        match Flat::parse(data) {
            Ok(chunk) => self.chunk(&chunk),
            Err(e) => self.fail(format!("invalid JSON in stream chunk: {e}")),
        }
    }

    fn chunk(&mut self, chunk: &Flat) {
        if let Some(error) = chunk.raw("error").filter(|e| *e != "null") {
            // Rare: the error whole, as a `Value`.
            let error = serde_json::from_str::<Value>(error).unwrap_or(Value::Null);
            return self.fail(format!("stream error: {}", describe_error(&error)));
        }
        if let Some(usage) = chunk.object("usage") {
            let details = usage.object("prompt_tokens_details");
            let cached = details.as_ref().and_then(|d| d.u64("cached_tokens"));
            if let Some(usage) = neutral_usage(usage.u64("prompt_tokens"), usage.u64("completion_tokens"), cached) {
                self.usage = Some(usage);
            }
        }
        let Some(choices) = chunk.items("choices") else { return };
        let Some(choice) = choices.into_iter().map(Flat::of).find(|c| c.u64("index").unwrap_or(0) == 0) else {
            return;
        };
        if let Some(delta) = choice.object("delta") {
            let reasoning =
                ["reasoning_content", "reasoning"].into_iter().find_map(|k| delta.str(k).filter(|s| !s.is_empty()));
            self.add_thinking(reasoning.as_deref());
            self.add_text(delta.str("content").as_deref());
            if let Some(pieces) = delta.items("tool_calls") {
                for (position, entry) in pieces.into_iter().enumerate() {
                    self.calls.piece(Piece::from_flat(&Flat::of(entry), position), &mut self.sink);
                }
            }
        }
        if let Some(reason) = choice.str("finish_reason") {
            self.finish_reason = Some(reason.into_owned());
        }
    }

    /// Take a whole non-streaming `chat.completion` (`application/json`).
    pub fn completion(&mut self, body: &Value) {
        if let Some(error) = body.get("error").filter(|e| !e.is_null()) {
            return self.fail(format!("API error: {}", describe_error(error)));
        }
        self.take_usage(body);
        if let Some(choice) = first_choice(body) {
            if let Some(message) = choice.get("message") {
                self.add_thinking(reasoning(message));
                self.add_text(message.get("content").and_then(Value::as_str));
                if let Some(list) = message.get("tool_calls").and_then(Value::as_array) {
                    for (position, entry) in list.iter().enumerate() {
                        self.calls.piece(Piece::from_json(entry, position), &mut self.sink);
                    }
                }
            }
            self.finish_reason = choice.get("finish_reason").and_then(Value::as_str).map(str::to_string);
        }
        self.done = true;
    }

    fn add_text(&mut self, chunk: Option<&str>) {
        if let Some(chunk) = chunk.filter(|c| !c.is_empty()) {
            self.text.push_str(chunk);
            self.sink.text(chunk);
        }
    }

    fn add_thinking(&mut self, chunk: Option<&str>) {
        if let Some(chunk) = chunk.filter(|c| !c.is_empty()) {
            self.thinking.push_str(chunk);
            self.sink.thinking(chunk);
        }
    }

    fn take_usage(&mut self, value: &Value) {
        let Some(usage) = value.get("usage") else { return };
        let count = |pointer: &str| usage.pointer(pointer).and_then(Value::as_u64);
        let cached = count("/prompt_tokens_details/cached_tokens");
        if let Some(usage) = neutral_usage(count("/prompt_tokens"), count("/completion_tokens"), cached) {
            self.usage = Some(usage);
        }
    }

    /// Close the call and build the neutral response.
    pub fn finish(mut self) -> Outcome {
        if !self.done {
            self.fail("stream ended before [DONE]");
        }
        let (calls, call_error) = self.calls.finish();
        if let Some(e) = call_error {
            self.fail(e);
        }
        let stop_reason = match self.finish_reason.as_deref() {
            Some("tool_calls") if calls.is_empty() => {
                self.fail("finish_reason `tool_calls` without a tool call");
                "error"
            }
            Some("tool_calls") => "tool_call",
            Some("stop") if !calls.is_empty() => "tool_call",
            Some("stop") => "end_turn",
            Some("length") => "max_tokens",
            Some(other) => {
                self.fail(format!("unsupported finish_reason `{other}`"));
                "error"
            }
            None => {
                self.fail("the response carried no finish_reason");
                "error"
            }
        };
        let stop_reason = if self.error.is_some() { "error" } else { stop_reason };
        let mut content = Vec::new();
        if !self.thinking.is_empty() {
            content.push(json!({"type": "thinking", "text": self.thinking, "signature": ""}));
        }
        if !self.text.is_empty() {
            content.push(json!({"type": "text", "text": self.text}));
        }
        content.extend(calls);
        let mut response = Map::new();
        response.insert("stop_reason".into(), stop_reason.into());
        response.insert("content".into(), Value::Array(content));
        if let Some(usage) = self.usage.take() {
            response.insert("usage".into(), usage);
        }
        if let Some(e) = &self.error {
            response.insert("error".into(), e.clone().into());
        }
        Outcome { response: Value::Object(response), error: self.error }
    }
}

/// Choice 0 (by its `index`; the first entry when none carries one).
fn first_choice(value: &Value) -> Option<&Value> {
    let choices = value.get("choices")?.as_array()?;
    choices.iter().find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
}

/// A delta's or message's reasoning text: `reasoning_content`, else `reasoning`.
fn reasoning(value: &Value) -> Option<&str> {
    let get = |key: &str| value.get(key).and_then(Value::as_str).filter(|s| !s.is_empty());
    get("reasoning_content").or_else(|| get("reasoning"))
}

/// A provider `usage` object's counts in the neutral shape; `None` when it holds no count.
fn neutral_usage(input: Option<u64>, output: Option<u64>, cached: Option<u64>) -> Option<Value> {
    if input.is_none() && output.is_none() {
        return None;
    }
    let mut neutral = json!({"input_tokens": input.unwrap_or(0), "output_tokens": output.unwrap_or(0)});
    if let Some(cached) = cached {
        neutral["cached_tokens"] = cached.into();
    }
    Some(neutral)
}

/// An `error` value as one line: `type (code): message`, with the parts the
/// provider sent. A plain string is taken as the message.
fn describe_error(error: &Value) -> String {
    if let Some(text) = error.as_str() {
        return text.to_string();
    }
    let kind = error.get("type").and_then(Value::as_str).filter(|s| !s.is_empty());
    let code = match error.get("code") {
        Some(Value::String(s)) if !s.is_empty() => Some(s.clone()),
        Some(Value::Number(n)) => Some(n.to_string()),
        _ => None,
    };
    let message = error.get("message").and_then(Value::as_str).unwrap_or("(no message)");
    match (kind, code) {
        (Some(kind), Some(code)) if kind != code => format!("{kind} ({code}): {message}"),
        (Some(kind), _) => format!("{kind}: {message}"),
        (None, Some(code)) => format!("{code}: {message}"),
        (None, None) => message.to_string(),
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A sink that writes every event down, for assertions.
    #[derive(Default)]
    pub struct Record(pub Vec<String>);

    impl Sink for Record {
        fn text(&mut self, c: &str) {
            self.0.push(format!("text {c}"));
        }
        fn thinking(&mut self, c: &str) {
            self.0.push(format!("thinking {c}"));
        }
        fn tool_started(&mut self, id: &str, name: &str) {
            self.0.push(format!("start {id} {name}"));
        }
        fn tool_bytes(&mut self, id: &str, n: u64) {
            self.0.push(format!("bytes {id} {n}"));
        }
    }

    impl Sink for &mut Record {
        fn text(&mut self, c: &str) {
            (**self).text(c);
        }
        fn thinking(&mut self, c: &str) {
            (**self).thinking(c);
        }
        fn tool_started(&mut self, id: &str, name: &str) {
            (**self).tool_started(id, name);
        }
        fn tool_bytes(&mut self, id: &str, n: u64) {
            (**self).tool_bytes(id, n);
        }
    }

    fn run(chunks: &[&str]) -> (Outcome, Vec<String>) {
        let mut rec = Record::default();
        let mut a = Assembler::new(&mut rec);
        for chunk in chunks {
            a.data(chunk);
        }
        let out = a.finish();
        (out, rec.0)
    }

    const ROLE: &str = r#"{"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""},"finish_reason":null}]}"#;
    const USAGE: &str = r#"{"id":"c","choices":[],"usage":{"prompt_tokens":12,"completion_tokens":7,"total_tokens":19,"prompt_tokens_details":{"cached_tokens":4}}}"#;

    #[test]
    fn text_reasoning_and_usage_only_final_chunk() {
        let (out, events) = run(&[
            ROLE,
            r#"{"choices":[{"index":0,"delta":{"reasoning_content":"let me","reasoning":"let me"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"reasoning":" think"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"Hel"},"logprobs":null}],"usage":null}"#,
            r#"{"choices":[{"index":0,"delta":{"content":"lo"},"finish_reason":"stop"}]}"#,
            USAGE,
            "[DONE]",
        ]);
        assert_eq!(out.error, None);
        assert_eq!(
            out.response,
            json!({
                "stop_reason": "end_turn",
                "content": [{"type": "thinking", "text": "let me think", "signature": ""}, {"type": "text", "text": "Hello"}],
                "usage": {"input_tokens": 12, "output_tokens": 7, "cached_tokens": 4}
            })
        );
        assert_eq!(events, ["thinking let me", "thinking  think", "text Hel", "text lo"]);
    }

    #[test]
    fn interleaved_parallel_tool_calls() {
        let (out, events) = run(&[
            ROLE,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_a","type":"function","function":{"name":"files","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":1,"id":"call_b","type":"function","function":{"name":"grep","arguments":"{\"q\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"op\":\"list\"}"}},{"index":1,"function":{"arguments":"\"x\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":9}}"#,
            "[DONE]",
        ]);
        assert_eq!(out.error, None);
        assert_eq!(
            out.response,
            json!({
                "stop_reason": "tool_call",
                "content": [
                    {"type": "tool_call", "id": "call_a", "name": "files", "input": {"op": "list"}},
                    {"type": "tool_call", "id": "call_b", "name": "grep", "input": {"q": "x"}}],
                "usage": {"input_tokens": 3, "output_tokens": 9}
            })
        );
        assert_eq!(
            events,
            [
                "start call_a files",
                "bytes call_a 0",
                "start call_b grep",
                "bytes call_b 5",
                "bytes call_a 13",
                "bytes call_b 9"
            ]
        );
    }

    #[test]
    fn error_chunk_keeps_content_so_far() {
        let (out, _) = run(&[
            r#"{"choices":[{"index":0,"delta":{"content":"partial"}}]}"#,
            r#"{"error":{"message":"The server had an error","type":"server_error","code":"internal"}}"#,
            r#"{"choices":[{"index":0,"delta":{"content":" ignored"}}]}"#,
            "[DONE]",
        ]);
        let message = "stream error: server_error (internal): The server had an error";
        assert_eq!(out.error.as_deref(), Some(message));
        assert_eq!(
            out.response,
            json!({"stop_reason": "error", "error": message,
                                         "content": [{"type": "text", "text": "partial"}]})
        );
    }

    #[test]
    fn missing_done_fails_but_keeps_content() {
        let (out, _) = run(&[ROLE, r#"{"choices":[{"index":0,"delta":{"content":"so far"},"finish_reason":"stop"}]}"#]);
        assert_eq!(out.error.as_deref(), Some("stream ended before [DONE]"));
        assert_eq!(out.response["stop_reason"], "error");
        assert_eq!(out.response["content"], json!([{"type": "text", "text": "so far"}]));
    }

    #[test]
    fn invalid_arguments_name_the_call() {
        let (out, _) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"call_z","function":{"name":"files","arguments":"{\"op\":"}}]},"finish_reason":"tool_calls"}]}"#,
            "[DONE]",
        ]);
        let e = out.error.unwrap();
        assert!(e.starts_with("tool call call_z (files): arguments are not valid JSON"), "{e}");
        assert_eq!(out.response["stop_reason"], "error");
        assert_eq!(out.response["content"], json!([]));
    }

    #[test]
    fn stop_reasons() {
        for (raw, want) in
            [("stop", "end_turn"), ("length", "max_tokens"), ("content_filter", "error"), ("tool_calls", "error")]
        {
            let chunk = format!(r#"{{"choices":[{{"index":0,"delta":{{"content":"x"}},"finish_reason":"{raw}"}}]}}"#);
            let (out, _) = run(&[&chunk, "[DONE]"]);
            assert_eq!(out.response["stop_reason"], want, "{raw}");
        }
        let (out, _) = run(&[r#"{"choices":[{"index":0,"delta":{"content":"x"}}]}"#, "[DONE]"]);
        assert_eq!(out.error.as_deref(), Some("the response carried no finish_reason"));
        // A local server that reports `stop` for a tool call.
        let (out, _) = run(&[
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"t","function":{"name":"n","arguments":"{}"}}]},"finish_reason":"stop"}]}"#,
            "[DONE]",
        ]);
        assert_eq!(out.response["stop_reason"], "tool_call");
    }

    #[test]
    fn bad_chunk_json_fails() {
        let (out, _) = run(&["{not json", "[DONE]"]);
        assert!(out.error.unwrap().starts_with("invalid JSON in stream chunk"));
    }

    #[test]
    fn whole_completion() {
        let mut rec = Record::default();
        let mut a = Assembler::new(&mut rec);
        a.completion(&json!({
            "id": "x", "object": "chat.completion",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": "sure", "reasoning_content": "hm",
                "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "files", "arguments": "{\"op\":\"list\"}"}}]}}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 6}
        }));
        let out = a.finish();
        assert_eq!(out.error, None);
        assert_eq!(
            out.response,
            json!({
                "stop_reason": "tool_call",
                "content": [{"type": "thinking", "text": "hm", "signature": ""}, {"type": "text", "text": "sure"},
                            {"type": "tool_call", "id": "c1", "name": "files", "input": {"op": "list"}}],
                "usage": {"input_tokens": 5, "output_tokens": 6}
            })
        );
        assert_eq!(rec.0, ["thinking hm", "text sure", "start c1 files", "bytes c1 13"]);

        let mut rec = Record::default();
        let mut a = Assembler::new(&mut rec);
        a.completion(&json!({"error": {"message": "bad key", "type": "invalid_request_error", "code": 401}}));
        assert_eq!(a.finish().error.as_deref(), Some("API error: invalid_request_error (401): bad key"));
    }
}
