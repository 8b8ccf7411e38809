//! The stub script: what the stub answers, turn by turn.
//!
//! A [`Script`] is a list of [`Turn`]s plus two chunk sizes. The n-th model request the stub
//! receives is answered from `turns[n]`. A script is read from YAML or JSON (JSON is valid YAML)
//! with `serde-saphyr`, or built in code with the small constructors below.
//!
//! Guarantees: unknown keys are refused at every level, so a misspelt field is a parse error rather
//! than a silently ignored instruction; [`Script::validate`] refuses chunk sizes of zero, HTTP
//! statuses the HTTP stack cannot send and raw turns that are ambiguous (see [`RawResponse`]), and
//! every loading path runs it. A raw turn's relative `body_file` is resolved against the script
//! file's folder by [`Script::load`], and used as given otherwise.
//!
//! Deliberately not here: anything about wire formats. This module only describes intent; the
//! `anthropic` and `openai` modules decide how that intent looks on the wire.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::StubError;

/// Default number of characters per streamed text or thinking delta.
pub const DEFAULT_CHUNK_CHARS: usize = 8;
/// Default size, in bytes, of each streamed piece of a tool call's serialized input.
pub const DEFAULT_DELTA_BYTES: usize = 16;

/// A whole stub script: the turns to play, in order, and how finely to cut streamed content.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// The answers, one per model request, in arrival order.
    pub turns: Vec<Turn>,
    /// Characters per text or thinking delta when streaming (default 8).
    #[serde(default = "default_chunk_chars")]
    pub chunk_chars: usize,
    /// Target bytes per tool-input delta when streaming (default 16). Pieces are cut on UTF-8
    /// character boundaries, so a piece is at most this long unless one character is longer.
    #[serde(default = "default_delta_bytes")]
    pub delta_bytes: usize,
}

fn default_chunk_chars() -> usize {
    DEFAULT_CHUNK_CHARS
}

fn default_delta_bytes() -> usize {
    DEFAULT_DELTA_BYTES
}

impl Default for Script {
    fn default() -> Self {
        Self::new(Vec::new())
    }
}

/// One scripted answer. Every field is optional; an empty turn is an empty assistant message.
///
/// Failure fields take precedence in this order: `http_error`, then `garbage`, then the normal
/// answer (which `stream_error` and `cut_after_events` may interrupt; `event_interval_ms` paces
/// it). A `raw` turn replaces the whole answer and may only be combined with `delay_ms` (a raw
/// answer is paced by its own `chunk_bytes` frames, not by `event_interval_ms`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Turn {
    /// Assistant text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
    /// A thinking block, sent before the text (Anthropic only; OpenAI Chat Completions has no
    /// place for it and the stub leaves it out there).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub thinking: Option<Thinking>,
    /// Tool calls, sent after the text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ToolCall>>,
    /// Token usage to report; missing numbers get defaults (see [`Usage`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Answer with this HTTP status and body instead of a model answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub http_error: Option<HttpError>,
    /// Answer 200 `text/event-stream` with exactly this raw body, then close the connection.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub garbage: Option<String>,
    /// Stream normally, but drop the connection after this many SSE events. The terminal event
    /// (`message_stop` or `[DONE]`) is never sent, even when the number is larger than the stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cut_after_events: Option<usize>,
    /// After streaming the text, send a provider error event and end the stream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_error: Option<StreamError>,
    /// A provider-side conversation id. Kept for scripts written ahead of wire formats that carry
    /// one; the Anthropic and OpenAI Chat Completions formats ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation_id: Option<String>,
    /// Wait this long after the request arrives before answering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
    /// When streaming, pause this long between two SSE events of the answer, so the stream is
    /// spread over time (`n` events take at least `(n - 1) × event_interval_ms`). Absent or 0:
    /// no pause beyond a yield to the runtime. A non-streaming answer is one body and ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_interval_ms: Option<u64>,
    /// Replay these exact bytes instead of rendering an answer: a recorded provider response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw: Option<RawResponse>,
}

/// A recorded response replayed byte for byte: the status, the content type and the body, sent
/// as they are, in frames of `chunk_bytes` bytes.
///
/// Exactly one of `body_file` and `body` must be given. Frames are cut on byte counts alone, so a
/// frame may end inside a multi-byte UTF-8 character; that is the point (clients must reassemble
/// bytes before decoding). The stub never looks inside the body.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RawResponse {
    /// The HTTP status (default 200).
    #[serde(default = "default_raw_status")]
    pub status: u16,
    /// The `content-type` header (default `text/event-stream`).
    #[serde(default = "default_raw_content_type")]
    pub content_type: String,
    /// A file holding the body. A relative path is resolved against the script file's folder
    /// when the script is loaded from a file ([`Script::load`]), and used as given otherwise. The
    /// file is read when the stub starts, so a missing file is a start error, not a bad answer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body_file: Option<PathBuf>,
    /// The body itself.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<String>,
    /// Send the body in frames of this many bytes, one frame at a time; absent sends the whole
    /// body as one frame with a `content-length`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chunk_bytes: Option<usize>,
}

fn default_raw_status() -> u16 {
    200
}

fn default_raw_content_type() -> String {
    "text/event-stream".to_owned()
}

impl RawResponse {
    /// A 200 `text/event-stream` answer with this body, sent whole.
    pub fn body(body: impl Into<String>) -> Self {
        Self { body: Some(body.into()), ..Self::file_or_body() }
    }

    /// A 200 `text/event-stream` answer with the bytes of this file, sent whole.
    pub fn file(path: impl Into<PathBuf>) -> Self {
        Self { body_file: Some(path.into()), ..Self::file_or_body() }
    }

    /// The defaults, with neither body source set.
    fn file_or_body() -> Self {
        Self {
            status: default_raw_status(),
            content_type: default_raw_content_type(),
            body_file: None,
            body: None,
            chunk_bytes: None,
        }
    }

    /// What is wrong with this raw answer, if anything.
    fn problem(&self) -> Option<String> {
        match (&self.body_file, &self.body) {
            (Some(_), Some(_)) => {
                return Some("raw has both body_file and body; give exactly one of them".to_owned());
            }
            (None, None) => {
                return Some("raw has neither body_file nor body; give exactly one of them".to_owned());
            }
            _ => {}
        }
        if self.chunk_bytes == Some(0) {
            return Some("raw.chunk_bytes must be at least 1".to_owned());
        }
        if axum::http::StatusCode::from_u16(self.status).is_err() {
            return Some(format!("raw.status {} is not an HTTP status code", self.status));
        }
        if axum::http::HeaderValue::from_str(&self.content_type).is_err() {
            return Some(format!("raw.content_type {:?} cannot be sent as a header value", self.content_type));
        }
        None
    }
}

/// A thinking block: the reasoning text and the signature that vouches for it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Thinking {
    /// The reasoning text, streamed in `chunk_chars` pieces.
    pub text: String,
    /// The opaque signature, sent whole in one `signature_delta`.
    pub signature: String,
}

/// One tool call the model asks for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCall {
    /// The call id. When absent the stub numbers calls through the whole script, starting at 1,
    /// and uses `toolu_stub_<n>` (Anthropic) or `call_stub_<n>` (OpenAI).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The tool's name.
    pub name: String,
    /// The arguments, any JSON value (an empty object when absent).
    #[serde(default = "empty_object")]
    pub input: serde_json::Value,
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

/// Token usage to report. Absent numbers default to 10 input tokens and, for output, the number
/// of streamed pieces the turn produces (text, thinking and tool-input pieces), or 5 when none.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Usage {
    /// Prompt tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub input_tokens: Option<u64>,
    /// Completion tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_tokens: Option<u64>,
    /// Prompt tokens served from the provider's cache; reported only when set.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
}

/// An HTTP error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpError {
    /// The status code (for example 429 or 529).
    pub status: u16,
    /// The body, sent verbatim with `content-type: application/json`.
    pub body: String,
    /// A `retry-after` header, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after: Option<u64>,
}

/// A provider error reported inside an otherwise successful stream.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StreamError {
    /// The error type, for example `overloaded_error`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The human-readable message.
    pub message: String,
}

impl Script {
    /// A script with these turns and the default chunk sizes.
    pub fn new(turns: Vec<Turn>) -> Self {
        Self { turns, chunk_chars: DEFAULT_CHUNK_CHARS, delta_bytes: DEFAULT_DELTA_BYTES }
    }

    /// Parses a script from YAML or JSON text and validates it.
    pub fn parse(text: &str) -> Result<Self, StubError> {
        let script: Self =
            serde_saphyr::from_str(text).map_err(|source| StubError::ParseScript { source: Box::new(source) })?;
        script.validate()?;
        Ok(script)
    }

    /// Reads, parses and validates a script file. Errors name the file. A raw turn's relative
    /// `body_file` is resolved against the file's folder.
    pub fn load(path: &Path) -> Result<Self, StubError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| StubError::ReadScriptFile { path: path.to_path_buf(), source })?;
        let mut script = Self::parse(&text)
            .map_err(|source| StubError::ScriptFile { path: path.to_path_buf(), source: Box::new(source) })?;
        if let Some(folder) = path.parent() {
            script.resolve_body_files(folder);
        }
        Ok(script)
    }

    /// Makes every relative raw `body_file` relative to `folder` instead.
    fn resolve_body_files(&mut self, folder: &Path) {
        let raws = self.turns.iter_mut().filter_map(|turn| turn.raw.as_mut());
        for file in raws.filter_map(|raw| raw.body_file.as_mut()) {
            if file.is_relative() {
                *file = folder.join(&*file);
            }
        }
    }

    /// Checks what the type system cannot: non-zero chunk sizes and sendable HTTP statuses.
    pub fn validate(&self) -> Result<(), StubError> {
        if self.chunk_chars == 0 {
            return Err(StubError::InvalidScript { reason: "chunk_chars must be at least 1".to_owned() });
        }
        if self.delta_bytes == 0 {
            return Err(StubError::InvalidScript { reason: "delta_bytes must be at least 1".to_owned() });
        }
        for (index, turn) in self.turns.iter().enumerate() {
            if let Some(raw) = &turn.raw {
                if let Some(problem) = raw.problem() {
                    return Err(StubError::InvalidScript { reason: format!("turn {index}: {problem}") });
                }
                if let Some(field) = turn.answer_field() {
                    return Err(StubError::InvalidScript {
                        reason: format!(
                            "turn {index}: raw replaces the whole answer, so {field} cannot be set beside it (only delay_ms can)"
                        ),
                    });
                }
            }
            if let Some(error) = &turn.http_error
                && axum::http::StatusCode::from_u16(error.status).is_err()
            {
                return Err(StubError::InvalidScript {
                    reason: format!("turn {index}: http_error.status {} is not an HTTP status code", error.status),
                });
            }
        }
        Ok(())
    }

    /// The number the stub gives the first id-less tool call of `turn`: calls are numbered
    /// through the whole script in order, starting at 1, whether or not they carry an id.
    pub(crate) fn first_tool_number(&self, turn: usize) -> usize {
        1 + self.turns.iter().take(turn).map(|t| t.tool_calls.as_ref().map_or(0, Vec::len)).sum::<usize>()
    }
}

impl Turn {
    /// A turn that answers with this text.
    pub fn text(text: impl Into<String>) -> Self {
        Self { text: Some(text.into()), ..Self::default() }
    }

    /// A turn that asks for one tool call (the id is assigned by the stub).
    pub fn tool_call(name: impl Into<String>, input: serde_json::Value) -> Self {
        Self { tool_calls: Some(vec![ToolCall { id: None, name: name.into(), input }]), ..Self::default() }
    }

    /// A turn that replays a recorded response.
    pub fn raw(raw: RawResponse) -> Self {
        Self { raw: Some(raw), ..Self::default() }
    }

    /// The first field, other than `raw` and `delay_ms`, that shapes the answer, if any is set.
    fn answer_field(&self) -> Option<&'static str> {
        [
            ("text", self.text.is_some()),
            ("thinking", self.thinking.is_some()),
            ("tool_calls", self.tool_calls.is_some()),
            ("usage", self.usage.is_some()),
            ("http_error", self.http_error.is_some()),
            ("garbage", self.garbage.is_some()),
            ("cut_after_events", self.cut_after_events.is_some()),
            ("stream_error", self.stream_error.is_some()),
            ("continuation_id", self.continuation_id.is_some()),
            ("event_interval_ms", self.event_interval_ms.is_some()),
        ]
        .into_iter()
        .find_map(|(name, set)| set.then_some(name))
    }

    /// A turn that answers with an HTTP error status and a JSON body.
    pub fn http_error(status: u16, body: impl Into<String>) -> Self {
        Self { http_error: Some(HttpError { status, body: body.into(), retry_after: None }), ..Self::default() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_yaml_script_parses_with_default_chunk_sizes() {
        let script = Script::parse(
            "turns:\n  - text: hello\n  - tool_calls:\n      - name: read\n        input: {path: a.txt}\n",
        )
        .expect("the script is valid");
        assert_eq!(script.chunk_chars, 8);
        assert_eq!(script.delta_bytes, 16);
        assert_eq!(script.turns[0].text.as_deref(), Some("hello"));
        let calls = script.turns[1].tool_calls.as_ref().expect("turn 1 has calls");
        assert_eq!(calls[0].input, serde_json::json!({"path": "a.txt"}));
    }

    #[test]
    fn a_json_script_parses_too() {
        let script = Script::parse(
            r#"{"turns": [{"text": "hi", "usage": {"input_tokens": 3, "output_tokens": 2}}], "chunk_chars": 2}"#,
        )
        .expect("JSON is valid YAML");
        assert_eq!(script.chunk_chars, 2);
        assert_eq!(script.turns[0].usage.as_ref().and_then(|u| u.input_tokens), Some(3));
    }

    #[test]
    fn unknown_keys_are_refused_in_turns_and_at_the_top() {
        assert!(Script::parse("turns:\n  - txet: typo\n").is_err());
        assert!(Script::parse("turns: []\nchunk_size: 3\n").is_err());
        assert!(Script::parse("turns:\n  - usage: {input_tokens: 1, tokens: 2}\n").is_err());
    }

    #[test]
    fn zero_chunk_sizes_and_impossible_statuses_are_refused() {
        assert!(Script::parse("turns: []\nchunk_chars: 0\n").is_err());
        assert!(Script::parse("turns: []\ndelta_bytes: 0\n").is_err());
        assert!(Script::parse("turns:\n  - http_error: {status: 42, body: '{}'}\n").is_err());
    }

    #[test]
    fn a_raw_turn_needs_exactly_one_body_source() {
        let both =
            Script::parse("turns:\n  - raw: {body: 'x', body_file: a.sse}\n").expect_err("both sources are refused");
        assert!(both.to_string().contains("both body_file and body"), "{both}");
        let neither = Script::parse("turns:\n  - raw: {status: 200}\n").expect_err("no source is refused");
        assert!(neither.to_string().contains("neither body_file nor body"), "{neither}");
    }

    #[test]
    fn a_raw_turn_gets_status_200_and_an_event_stream_by_default() {
        let script = Script::parse("turns:\n  - raw: {body: 'data: x'}\n").expect("valid");
        assert_eq!(script.turns[0].raw, Some(RawResponse::body("data: x")));
        let raw = RawResponse::body("");
        assert_eq!((raw.status, raw.content_type.as_str()), (200, "text/event-stream"));
    }

    #[test]
    fn a_raw_turn_refuses_zero_chunks_bad_headers_and_other_answer_fields() {
        for (script, says) in [
            ("turns:\n  - raw: {body: x, chunk_bytes: 0}\n", "chunk_bytes"),
            ("turns:\n  - raw: {body: x, status: 42}\n", "raw.status 42"),
            ("turns:\n  - raw: {body: x, content_type: \"a\\nb\"}\n", "content_type"),
            ("turns:\n  - raw: {body: x}\n    text: hi\n", "text cannot be set"),
            ("turns:\n  - raw: {body: x}\n    raw_typo: 1\n", ""),
        ] {
            let error = Script::parse(script).expect_err(script);
            assert!(error.to_string().contains(says), "{script}: {error}");
        }
        assert!(Script::parse("turns:\n  - raw: {body: x}\n    delay_ms: 5\n").is_ok());
    }

    #[test]
    fn event_interval_ms_parses_per_turn_and_is_refused_beside_raw() {
        let script = Script::parse("turns:\n  - text: hi\n    event_interval_ms: 3\n  - text: bye\n").expect("valid");
        assert_eq!(script.turns[0].event_interval_ms, Some(3));
        assert_eq!(script.turns[1].event_interval_ms, None, "the pause is per turn");
        let error = Script::parse("turns:\n  - raw: {body: x}\n    event_interval_ms: 3\n")
            .expect_err("raw replaces the whole answer");
        assert!(error.to_string().contains("event_interval_ms cannot be set"), "{error}");
    }

    #[test]
    fn a_relative_body_file_is_resolved_against_the_script_folder_only_when_loaded() {
        let mut script =
            Script::new(vec![Turn::raw(RawResponse::file("cases/a.sse")), Turn::raw(RawResponse::file("/abs/b.sse"))]);
        script.resolve_body_files(Path::new("/scripts"));
        let files: Vec<_> = script.turns.iter().filter_map(|t| t.raw.as_ref()?.body_file.clone()).collect();
        assert_eq!(files, [PathBuf::from("/scripts/cases/a.sse"), PathBuf::from("/abs/b.sse")]);
        let parsed = Script::parse("turns:\n  - raw: {body_file: cases/a.sse}\n").expect("valid");
        assert_eq!(parsed.turns[0].raw.as_ref().and_then(|r| r.body_file.clone()), Some(PathBuf::from("cases/a.sse")));
    }

    #[test]
    fn tool_calls_are_numbered_through_the_whole_script() {
        let script = Script::new(vec![
            Turn::tool_call("a", serde_json::json!({})),
            Turn::text("x"),
            Turn::tool_call("b", serde_json::json!({})),
        ]);
        assert_eq!(script.first_tool_number(0), 1);
        assert_eq!(script.first_tool_number(2), 2);
    }
}
