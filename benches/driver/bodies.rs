//! What the driver bench sends and replays: the neutral requests the drivers are given, and the
//! provider bodies the stub answers with (a tiny answer, and ≈`STREAM_BYTES` streams of text
//! and tool-input deltas in each provider's wire format), with what each stream must produce.

use super::{MODEL, STREAM_BYTES};
use capsule_protocol::neutral::{Block, DriverRequest, Message, Role, ToolSpec};
use serde_json::{Value, json};

/// The provider a driver speaks.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Provider {
    Anthropic,
    OpenAi,
}

impl Provider {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Provider::Anthropic => "anthropic",
            Provider::OpenAi => "openai",
        }
    }
}

pub(crate) fn assistant(content: Vec<Block>) -> Message {
    Message { role: Role::Assistant, content, tool_call_id: None, is_error: None, produced_by: None }
}

pub(crate) fn call_block(id: &str, input: Value) -> Block {
    Block::ToolCall { id: id.into(), name: "files".into(), input }
}

/// A realistic 10-message conversation in the middle of a task: a user ask, two parallel tool
/// calls and their results, more calls, a reply, a follow-up, and one more call and result.
/// Two tools with JSON schemas and a system prompt; about 6 KB of neutral JSON.
pub(crate) fn ten_message_request() -> String {
    let source: String =
        (0..24).map(|i| format!("fn step_{i}(x: u64) -> u64 {{ x.wrapping_mul({i}) + 1 }}\n")).collect();
    let messages = vec![
        Message::user_text(
            "Please look at src/lib.rs and src/main.rs, then make every step function saturating instead of wrapping, and tell me what you changed.",
        ),
        assistant(vec![
            Block::Text { text: "I'll read both files first.".into() },
            call_block("call_1", json!({"op": "read", "path": "src/lib.rs"})),
            call_block("call_2", json!({"op": "read", "path": "src/main.rs"})),
        ]),
        Message::tool_result("call_1", source.clone(), false),
        Message::tool_result("call_2", "fn main() {\n    println!(\"{}\", lib::step_3(7));\n}\n", false),
        assistant(vec![call_block(
            "call_3",
            json!({"op": "write", "path": "src/lib.rs", "content": source.replace("wrapping_mul", "saturating_mul")}),
        )]),
        Message::tool_result("call_3", "wrote 1 file (1,234 bytes)", false),
        assistant(vec![Block::Text {
            text: "Done: all 24 step functions in src/lib.rs now use saturating_mul; src/main.rs needed no change."
                .into(),
        }]),
        Message::user_text("Thanks. Can you also list the folder so I can see nothing else changed?"),
        assistant(vec![call_block("call_4", json!({"op": "list", "path": "."}))]),
        Message::tool_result("call_4", "Cargo.toml\nREADME.md\nsrc/\nsrc/lib.rs\nsrc/main.rs\ntests/\n", false),
    ];
    let tools = vec![
        ToolSpec {
            name: "files".into(),
            description: Some("Read, write and list files in the capsule's folder.".into()),
            parameters: json!({"type": "object", "properties": {"op": {"type": "string", "enum": ["read", "write", "list"]}, "path": {"type": "string"}, "content": {"type": "string"}}, "required": ["op", "path"]}),
        },
        ToolSpec {
            name: "search".into(),
            description: Some("Search the folder for a regular expression.".into()),
            parameters: json!({"type": "object", "properties": {"pattern": {"type": "string"}, "max_results": {"type": "integer"}}, "required": ["pattern"]}),
        },
    ];
    let request = DriverRequest {
        model: MODEL.into(),
        max_tokens: 4096,
        system: "You are a careful coding agent. Use the tools to inspect files before changing them, and say what you changed.".into(),
        messages,
        tools,
        params: serde_json::Map::new(),
        continuation_id: None,
        prompt_cache_key: "bench:0.1.0".into(),
    };
    assert_eq!(request.messages.len(), 10);
    serde_json::to_string(&request).expect("serializes")
}

/// The smallest request: one short user message, no tools, no system prompt.
pub(crate) fn one_message_request() -> String {
    let request = DriverRequest {
        model: MODEL.into(),
        max_tokens: 1024,
        system: String::new(),
        messages: vec![Message::user_text("What is the weather in Paris?")],
        tools: Vec::new(),
        params: serde_json::Map::new(),
        continuation_id: None,
        prompt_cache_key: "bench:0.1.0".into(),
    };
    serde_json::to_string(&request).expect("serializes")
}

pub(crate) fn sse(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

pub(crate) fn oa_data(data: &Value) -> String {
    format!("data: {data}\n\n")
}

pub(crate) fn oa_chunk(delta: Value, finish: Option<&str>) -> Value {
    json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_750_000_000, "model": MODEL, "choices": [{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}], "usage": null})
}

pub(crate) fn oa_usage() -> Value {
    json!({"id": "chatcmpl-bench", "object": "chat.completion.chunk", "created": 1_750_000_000, "model": MODEL, "choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 1, "total_tokens": 1201}})
}

pub(crate) fn an_start() -> String {
    sse(
        "message_start",
        &json!({"type": "message_start", "message": {"id": "msg_bench", "type": "message", "role": "assistant", "model": MODEL, "content": [], "stop_reason": null, "stop_sequence": null, "usage": {"input_tokens": 1200, "output_tokens": 1}}}),
    )
}

pub(crate) fn an_end(stop: &str) -> String {
    sse(
        "message_delta",
        &json!({"type": "message_delta", "delta": {"stop_reason": stop, "stop_sequence": null}, "usage": {"output_tokens": 1}}),
    ) + &sse("message_stop", &json!({"type": "message_stop"}))
}

/// The smallest complete streamed answer: one text delta "ok".
pub(crate) fn tiny_body(p: Provider) -> String {
    match p {
        Provider::Anthropic => {
            an_start()
                + &sse(
                    "content_block_start",
                    &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
                )
                + &sse(
                    "content_block_delta",
                    &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}}),
                )
                + &sse("content_block_stop", &json!({"type": "content_block_stop", "index": 0}))
                + &an_end("end_turn")
        }
        Provider::OpenAi => {
            oa_data(&oa_chunk(json!({"role": "assistant", "content": "ok"}), None))
                + &oa_data(&oa_chunk(json!({}), Some("stop")))
                + &oa_data(&oa_usage())
                + "data: [DONE]\n\n"
        }
    }
}

/// Text pieces of 20–30 bytes, like real token deltas: words, punctuation, some newlines,
/// some quotes and an occasional non-ASCII character.
pub(crate) fn text_piece(i: usize) -> String {
    const WORDS: [&str; 12] = [
        "the",
        "stream",
        "parser",
        "reads",
        "bytes,",
        "then",
        "émits",
        "\"events\"",
        "for",
        "each",
        "delta",
        "line.\n",
    ];
    let mut s = String::new();
    let mut k = i;
    while s.len() < 20 {
        s.push_str(WORDS[k % WORDS.len()]);
        s.push(' ');
        k = k.wrapping_mul(7).wrapping_add(3);
    }
    s
}

/// A tool input whose compact JSON is about `bytes` long: a file write with a long content.
pub(crate) fn big_tool_input(bytes: usize) -> Value {
    let mut content = String::with_capacity(bytes);
    let mut i = 0;
    while content.len() < bytes {
        content.push_str(&format!("    let value_{i} = compute(\"key {i}\", {i});\n"));
        i += 1;
    }
    json!({"op": "write", "path": "src/generated.rs", "content": content})
}

/// Cuts `s` into pieces of at most `n` bytes on character boundaries (as the stub does).
pub(crate) fn pieces(s: &str, n: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        let mut end = n.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        let (a, b) = rest.split_at(end);
        out.push(a);
        rest = b;
    }
    out
}

/// What a generated stream must produce.
pub(crate) struct Expect {
    pub(crate) chunks: u64,
    pub(crate) text_bytes: u64,
    pub(crate) tool_reports: u64,
    pub(crate) tool_input: Option<Value>,
}

/// A ≈`STREAM_BYTES` stream of text deltas.
pub(crate) fn text_stream(p: Provider) -> (String, Expect) {
    let mut body = String::with_capacity(STREAM_BYTES + 4096);
    let (mut chunks, mut text_bytes) = (0u64, 0u64);
    match p {
        Provider::Anthropic => {
            body.push_str(&an_start());
            body.push_str(&sse(
                "content_block_start",
                &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            ));
        }
        Provider::OpenAi => body.push_str(&oa_data(&oa_chunk(json!({"role": "assistant", "content": ""}), None))),
    }
    let mut i = 0;
    while body.len() < STREAM_BYTES {
        let t = text_piece(i);
        i += 1;
        chunks += 1;
        text_bytes += t.len() as u64;
        match p {
            Provider::Anthropic => body.push_str(&sse(
                "content_block_delta",
                &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": t}}),
            )),
            Provider::OpenAi => body.push_str(&oa_data(&oa_chunk(json!({"content": t}), None))),
        }
    }
    match p {
        Provider::Anthropic => {
            body.push_str(&sse("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
            body.push_str(&an_end("end_turn"));
        }
        Provider::OpenAi => {
            body.push_str(&oa_data(&oa_chunk(json!({}), Some("stop"))));
            body.push_str(&oa_data(&oa_usage()));
            body.push_str("data: [DONE]\n\n");
        }
    }
    (body, Expect { chunks, text_bytes, tool_reports: 0, tool_input: None })
}

/// A ≈`STREAM_BYTES` stream of one tool call's input in 16-byte deltas (the stub's default
/// `delta_bytes`): Anthropic `input_json_delta`, OpenAI `function.arguments`.
pub(crate) fn tool_stream(p: Provider) -> (String, Expect) {
    // Each 16-byte delta of the input costs ~155 bytes of SSE (Anthropic) or ~280 (OpenAI), the
    // escaping of the JSON-in-JSON included.
    let input_bytes = match p {
        Provider::Anthropic => STREAM_BYTES * 16 / 155,
        Provider::OpenAi => STREAM_BYTES * 16 / 280,
    };
    let input = big_tool_input(input_bytes);
    let compact = input.to_string();
    let parts = pieces(&compact, 16);
    let mut body = String::with_capacity(STREAM_BYTES + 4096);
    match p {
        Provider::Anthropic => {
            body.push_str(&an_start());
            body.push_str(&sse("content_block_start", &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "toolu_bench", "name": "files", "input": {}}})));
            for piece in &parts {
                body.push_str(&sse("content_block_delta", &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}})));
            }
            body.push_str(&sse("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
            body.push_str(&an_end("tool_use"));
        }
        Provider::OpenAi => {
            body.push_str(&oa_data(&oa_chunk(json!({"role": "assistant", "content": null}), None)));
            body.push_str(&oa_data(&oa_chunk(json!({"tool_calls": [{"index": 0, "id": "call_bench", "type": "function", "function": {"name": "files", "arguments": ""}}]}), None)));
            for piece in &parts {
                body.push_str(&oa_data(&oa_chunk(
                    json!({"tool_calls": [{"index": 0, "function": {"arguments": piece}}]}),
                    None,
                )));
            }
            body.push_str(&oa_data(&oa_chunk(json!({}), Some("tool_calls"))));
            body.push_str(&oa_data(&oa_usage()));
            body.push_str("data: [DONE]\n\n");
        }
    }
    // OpenAI reports the empty first `arguments` too (one report per piece, empty ones included).
    let reports = parts.len() as u64 + u64::from(p == Provider::OpenAi);
    (body, Expect { chunks: 0, text_bytes: 0, tool_reports: reports, tool_input: Some(input) })
}
