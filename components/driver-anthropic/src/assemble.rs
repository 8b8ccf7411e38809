//! Anthropic response → neutral response, with live events on the way.
//!
//! An [`Assembler`] consumes the Messages API's streaming events one by one
//! (or a whole non-streaming response), forwards live progress to a [`Sink`]
//! (text and thinking chunks, tool-call starts, cumulative tool-input bytes)
//! and builds the neutral response
//! `{stop_reason, content, usage?, error?}` (CONTRACT §3).
//!
//! Every failure is recorded, never raised: the first error wins, content
//! received before it is kept, and `finish` turns it into
//! `stop_reason: "error"`. A tool call whose input never completed (or does
//! not parse) is left out of the content, so no half-built call can run.
//!
//! Deliberately not done: citations, server-tool blocks and other block or
//! delta types this runtime has no neutral form for are ignored; empty text
//! blocks are dropped (the API refuses them when they are sent back).

use guest_http::flat::Flat;
use serde_json::{Map, Value, json};
use std::collections::BTreeMap;

/// Where live progress goes while a response streams in.
pub trait Sink {
    fn text(&mut self, chunk: &str);
    fn thinking(&mut self, chunk: &str);
    fn tool_started(&mut self, id: &str, name: &str);
    fn tool_bytes(&mut self, id: &str, bytes: u64);
}

enum Block {
    Text(String),
    ToolUse {
        id: String,
        name: String,
        json: String,
        input: Option<Value>,
    },
    Thinking {
        text: String,
        signature: String,
    },
    Redacted(String),
    /// A block type with no neutral form.
    Skipped,
}

#[derive(Default)]
struct Usage {
    input: Option<u64>,
    output: Option<u64>,
    cached: Option<u64>,
    cache_write: Option<u64>,
}

impl Usage {
    /// Take every count present in a provider `usage` object (`get` reads one of its keys).
    fn update(&mut self, get: impl Fn(&str) -> Option<u64>) {
        for (slot, key) in [
            (&mut self.input, "input_tokens"),
            (&mut self.output, "output_tokens"),
            (&mut self.cached, "cache_read_input_tokens"),
            (&mut self.cache_write, "cache_creation_input_tokens"),
        ] {
            if let Some(n) = get(key) {
                *slot = Some(n);
            }
        }
    }

    fn seen(&self) -> bool {
        self.input.is_some() || self.output.is_some()
    }

    fn to_json(&self) -> Value {
        let mut u = json!({
            "input_tokens": self.input.unwrap_or(0),
            "output_tokens": self.output.unwrap_or(0),
        });
        if let Some(n) = self.cached {
            u["cached_tokens"] = n.into();
        }
        if let Some(n) = self.cache_write {
            u["cache_write_tokens"] = n.into();
        }
        u
    }
}

/// The finished call: the neutral response and, if it failed, why.
pub struct Outcome {
    pub response: Value,
    pub error: Option<String>,
}

pub struct Assembler<S: Sink> {
    sink: S,
    blocks: BTreeMap<u64, Block>,
    stop_reason: Option<String>,
    usage: Usage,
    stopped: bool,
    error: Option<String>,
}

impl<S: Sink> Assembler<S> {
    pub fn new(sink: S) -> Self {
        Self { sink, blocks: BTreeMap::new(), stop_reason: None, usage: Usage::default(), stopped: false, error: None }
    }

    /// Record a failure; the first one wins.
    pub fn fail(&mut self, message: impl Into<String>) {
        if self.error.is_none() {
            self.error = Some(message.into());
        }
    }

    /// No further input can change the outcome (terminal event or error).
    pub fn is_finished(&self) -> bool {
        self.stopped || self.error.is_some()
    }

    /// Handle one SSE event. `name` may be empty; then the `type` in the data
    /// names it. The data is read as a [`Flat`]: the fields asked for below,
    /// as a `Value` would give them, without building one.
    pub fn event(&mut self, name: &str, data: &str) {
        if self.is_finished() {
            return;
        }
        let value = match Flat::parse(data) {
            Ok(v) => v,
            Err(e) => return self.fail(format!("invalid JSON in stream event `{name}`: {e}")),
        };
        let named = if name.is_empty() { value.str("type") } else { None };
        let kind = named.as_deref().unwrap_or(name);
        match kind {
            "message_start" => {
                if let Some(usage) = value.object("message").as_ref().and_then(|m| m.object("usage")) {
                    self.usage.update(|k| usage.u64(k));
                }
            }
            "content_block_start" => self.block_start(&value),
            "content_block_delta" => self.block_delta(&value),
            "content_block_stop" => {
                if let Some(index) = self.index(&value, kind) {
                    self.block_stop(index);
                }
            }
            "message_delta" => {
                if let Some(reason) = value.object("delta").as_ref().and_then(|d| d.str("stop_reason")) {
                    self.stop_reason = Some(reason.into_owned());
                }
                if let Some(usage) = value.object("usage") {
                    self.usage.update(|k| usage.u64(k));
                }
            }
            "message_stop" => self.stopped = true,
            "error" => {
                let error = value.object("error").unwrap_or_default();
                let kind = error.str("type");
                let message = error.str("message");
                let (kind, message) =
                    (kind.as_deref().unwrap_or("error"), message.as_deref().unwrap_or("(no message)"));
                self.fail(format!("stream error: {kind}: {message}"));
            }
            _ => {} // `ping` and event types added later
        }
    }

    fn index(&mut self, value: &Flat, kind: &str) -> Option<u64> {
        let index = value.u64("index");
        if index.is_none() {
            self.fail(format!("stream event `{kind}` has no index"));
        }
        index
    }

    fn block_start(&mut self, value: &Flat) {
        let Some(index) = self.index(value, "content_block_start") else { return };
        let block = value.object("content_block").unwrap_or_default();
        let field = |key: &str| block.str(key).unwrap_or_default().into_owned();
        let new = match block.str("type").as_deref().unwrap_or("") {
            "text" => {
                let text = field("text");
                if !text.is_empty() {
                    self.sink.text(&text);
                }
                Block::Text(text)
            }
            "tool_use" => {
                let (id, name) = (field("id"), field("name"));
                self.sink.tool_started(&id, &name);
                Block::ToolUse { id, name, json: String::new(), input: None }
            }
            "thinking" => {
                let text = field("thinking");
                if !text.is_empty() {
                    self.sink.thinking(&text);
                }
                Block::Thinking { text, signature: field("signature") }
            }
            "redacted_thinking" => Block::Redacted(field("data")),
            _ => Block::Skipped,
        };
        self.blocks.insert(index, new);
    }

    fn block_delta(&mut self, value: &Flat) {
        let Some(index) = self.index(value, "content_block_delta") else { return };
        let Some(block) = self.blocks.get_mut(&index) else {
            return self.fail(format!("content_block_delta for block {index}, which never started"));
        };
        let delta = value.object("delta").unwrap_or_default();
        let field = |key: &str| delta.str(key).unwrap_or_default();
        match (delta.str("type").as_deref().unwrap_or(""), block) {
            ("text_delta", Block::Text(text)) => {
                let chunk = field("text");
                text.push_str(&chunk);
                if !chunk.is_empty() {
                    self.sink.text(&chunk);
                }
            }
            ("input_json_delta", Block::ToolUse { id, json, .. }) => {
                json.push_str(&field("partial_json"));
                self.sink.tool_bytes(id, json.len() as u64);
            }
            ("thinking_delta", Block::Thinking { text, .. }) => {
                let chunk = field("thinking");
                text.push_str(&chunk);
                if !chunk.is_empty() {
                    self.sink.thinking(&chunk);
                }
            }
            ("signature_delta", Block::Thinking { signature, .. }) => signature.push_str(&field("signature")),
            _ => {} // citations and deltas for skipped blocks
        }
    }

    /// A block is complete: a tool call's accumulated input must now parse.
    fn block_stop(&mut self, index: u64) {
        if let Some(Block::ToolUse { id, name, json, input: input @ None }) = self.blocks.get_mut(&index) {
            match parse_input(json) {
                Ok(v) => *input = Some(v),
                Err(e) => {
                    let message = format!("tool call {id} ({name}): input is not valid JSON: {e}");
                    self.fail(message);
                }
            }
        }
    }

    /// Take a whole non-streaming Messages response (`application/json`).
    pub fn message(&mut self, body: &Value) {
        if body.get("type").and_then(Value::as_str) == Some("error") {
            let kind = body.pointer("/error/type").and_then(Value::as_str).unwrap_or("error");
            let message = body.pointer("/error/message").and_then(Value::as_str).unwrap_or("(no message)");
            return self.fail(format!("{kind}: {message}"));
        }
        if let Some(usage) = body.get("usage") {
            self.usage.update(|k| usage.get(k).and_then(Value::as_u64));
        }
        self.stop_reason = body.get("stop_reason").and_then(Value::as_str).map(str::to_string);
        let blocks = body.get("content").and_then(Value::as_array).cloned().unwrap_or_default();
        for (index, block) in blocks.iter().enumerate() {
            let field = |key: &str| block.get(key).and_then(Value::as_str).unwrap_or("").to_string();
            let new = match block.get("type").and_then(Value::as_str).unwrap_or("") {
                "text" => {
                    let text = field("text");
                    if !text.is_empty() {
                        self.sink.text(&text);
                    }
                    Block::Text(text)
                }
                "tool_use" => {
                    let (id, name) = (field("id"), field("name"));
                    let input = block.get("input").cloned().unwrap_or_else(|| json!({}));
                    self.sink.tool_started(&id, &name);
                    self.sink.tool_bytes(&id, input.to_string().len() as u64);
                    Block::ToolUse { id, name, json: String::new(), input: Some(input) }
                }
                "thinking" => {
                    let text = field("thinking");
                    if !text.is_empty() {
                        self.sink.thinking(&text);
                    }
                    Block::Thinking { text, signature: field("signature") }
                }
                "redacted_thinking" => Block::Redacted(field("data")),
                _ => Block::Skipped,
            };
            self.blocks.insert(index as u64, new);
        }
        self.stopped = true;
    }

    /// Close the call and build the neutral response.
    pub fn finish(mut self) -> Outcome {
        if !self.stopped {
            self.fail("stream ended before message_stop");
        }
        let indices: Vec<u64> = self.blocks.keys().copied().collect();
        for index in indices {
            self.block_stop(index);
        }
        let stop_reason = match self.stop_reason.as_deref() {
            Some("tool_use") => "tool_call",
            Some("end_turn" | "stop_sequence") => "end_turn",
            Some("max_tokens") => "max_tokens",
            Some(other) => {
                self.fail(format!("unsupported stop_reason `{other}`"));
                "error"
            }
            None => {
                self.fail("the response carried no stop_reason");
                "error"
            }
        };
        let stop_reason = if self.error.is_some() { "error" } else { stop_reason };
        let content: Vec<Value> = self.blocks.values().filter_map(neutral_block).collect();
        let mut response = Map::new();
        response.insert("stop_reason".into(), stop_reason.into());
        response.insert("content".into(), Value::Array(content));
        if self.usage.seen() {
            response.insert("usage".into(), self.usage.to_json());
        }
        if let Some(e) = &self.error {
            response.insert("error".into(), e.clone().into());
        }
        Outcome { response: Value::Object(response), error: self.error }
    }
}

/// A tool call's streamed input: empty means `{}`.
fn parse_input(json: &str) -> Result<Value, serde_json::Error> {
    if json.trim().is_empty() { Ok(json!({})) } else { serde_json::from_str(json) }
}

fn neutral_block(block: &Block) -> Option<Value> {
    match block {
        Block::Text(text) if !text.is_empty() => Some(json!({"type": "text", "text": text})),
        Block::ToolUse { id, name, input: Some(input), .. } => {
            Some(json!({"type": "tool_call", "id": id, "name": name, "input": input}))
        }
        Block::Thinking { text, signature } if !(text.is_empty() && signature.is_empty()) => {
            Some(json!({"type": "thinking", "text": text, "signature": signature}))
        }
        Block::Redacted(data) => Some(json!({"type": "redacted_thinking", "data": data})),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Default)]
    struct Record(Vec<String>);

    impl Sink for &mut Record {
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

    const STREAM: &[(&str, &str)] = &[
        (
            "message_start",
            r#"{"type":"message_start","message":{"usage":{"input_tokens":10,"output_tokens":1,"cache_read_input_tokens":4,"cache_creation_input_tokens":2}}}"#,
        ),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hm"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"SIG"}}"#,
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":0}"#),
        ("ping", r#"{"type":"ping"}"#),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Hi"}}"#,
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":1}"#),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"tu1","name":"files","input":{}}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"op\":"}}"#,
        ),
        (
            "content_block_delta",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"\"list\"}"}}"#,
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":2}"#),
        (
            "content_block_start",
            r#"{"type":"content_block_start","index":3,"content_block":{"type":"tool_use","id":"tu2","name":"noargs"}}"#,
        ),
        ("content_block_stop", r#"{"type":"content_block_stop","index":3}"#),
        (
            "message_delta",
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":42}}"#,
        ),
        ("message_stop", r#"{"type":"message_stop"}"#),
    ];

    #[test]
    fn full_stream() {
        let mut rec = Record::default();
        let mut a = Assembler::new(&mut rec);
        for (name, data) in STREAM {
            a.event(name, data);
        }
        let out = a.finish();
        assert_eq!(out.error, None);
        assert_eq!(
            out.response,
            json!({
                "stop_reason": "tool_call",
                "content": [
                    {"type": "thinking", "text": "hm", "signature": "SIG"},
                    {"type": "text", "text": "Hi"},
                    {"type": "tool_call", "id": "tu1", "name": "files", "input": {"op": "list"}},
                    {"type": "tool_call", "id": "tu2", "name": "noargs", "input": {}}
                ],
                "usage": {"input_tokens": 10, "output_tokens": 42, "cached_tokens": 4, "cache_write_tokens": 2}
            })
        );
        assert_eq!(
            rec.0,
            ["thinking hm", "text Hi", "start tu1 files", "bytes tu1 6", "bytes tu1 13", "start tu2 noargs"]
        );
    }

    #[test]
    fn truncated_stream_keeps_text() {
        let mut rec = Record::default();
        let mut a = Assembler::new(&mut rec);
        for (name, data) in &STREAM[..11] {
            a.event(name, data);
        }
        let out = a.finish();
        assert_eq!(out.error.as_deref(), Some("stream ended before message_stop"));
        assert_eq!(out.response["stop_reason"], "error");
        assert_eq!(out.response["content"][1]["text"], "Hi");
        assert_eq!(out.response["content"].as_array().unwrap().len(), 2, "half a tool call is dropped");
    }

    #[test]
    fn error_event_and_bad_tool_json() {
        let mut rec = Record::default();
        let mut a = Assembler::new(&mut rec);
        a.event("error", r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#);
        let out = a.finish();
        assert_eq!(out.error.as_deref(), Some("stream error: overloaded_error: Overloaded"));

        let mut a = Assembler::new(&mut rec);
        a.event("", STREAM[9].1);
        a.event(
            "",
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{nope"}}"#,
        );
        a.event("", STREAM[12].1);
        let e = a.finish().error.unwrap();
        assert!(e.contains("tu1") && e.contains("files"), "{e}");
    }

    #[test]
    fn stop_reasons() {
        for (raw, want) in [
            ("end_turn", "end_turn"),
            ("stop_sequence", "end_turn"),
            ("max_tokens", "max_tokens"),
            ("refusal", "error"),
        ] {
            let mut rec = Record::default();
            let mut a = Assembler::new(&mut rec);
            a.message(&json!({"type": "message", "content": [{"type": "text", "text": "x"}], "stop_reason": raw,
                               "usage": {"input_tokens": 1, "output_tokens": 2}}));
            assert_eq!(a.finish().response["stop_reason"], want);
        }
    }
}
