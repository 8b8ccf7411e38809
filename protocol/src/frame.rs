//! Frames of the event stream (CONTRACT §10): what a client sees over SSE, and what
//! `capsule run --json` prints one per line.
//!
//! A [`Frame`] is the event name plus its JSON data; the stream emitter gives it its id.
//! Keys are exactly the contract's, including `null` for values that do not apply.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Task states of a `status` frame.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum TaskState {
    /// Running (`inference turn N`).
    Working,
    /// Waiting for a person.
    InputRequired,
    /// Done; carries the response.
    Completed,
    /// Ended in failure.
    Failed,
    /// Canceled by a client.
    Canceled,
    /// Not accepted (busy).
    Rejected,
}

impl TaskState {
    /// Whether this state ends the task.
    pub fn is_final(self) -> bool {
        !matches!(self, TaskState::Working | TaskState::InputRequired)
    }
}

/// The `status` of a `status` frame.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct StatusBody {
    /// State.
    pub state: TaskState,
    /// Human message.
    pub message: String,
    /// The reply, for `completed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
}

/// The `artifact` of an `artifact` frame: one finished tool call.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ArtifactBody {
    /// Tool name.
    pub tool_name: Option<String>,
    /// Result text.
    pub content: Option<String>,
    /// Fence language hint, when any.
    pub fence_source: Option<String>,
    /// The call id.
    pub tool_call_id: Option<String>,
    /// Whether the result is an error.
    pub is_error: Option<bool>,
    /// Wall time of the call.
    pub duration_ms: Option<u64>,
    /// Exit code, for tools that have one.
    pub exit_code: Option<i64>,
    /// Whether the content was truncated.
    pub truncated: Option<bool>,
    /// When the frame carries only the first [`ARTIFACT_FRAME_BYTES`] of a longer result: the
    /// file (relative to the session folder) that holds all of it.
    pub output_file: Option<String>,
}

/// Bytes of a tool result an `artifact` frame (and the trace) carries; a longer result is cut
/// there (`truncated: true`) and kept whole in one file the frame names (`output_file`).
pub const ARTIFACT_FRAME_BYTES: usize = 64 * 1024;

/// The first `max` bytes of `s`, cut at a character boundary.
pub fn prefix(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    &s[..cut]
}

/// One frame, before it gets its id.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "event", content = "data", rename_all = "kebab-case")]
pub enum Frame {
    /// Task status.
    Status {
        /// Task id.
        id: String,
        /// Context id.
        context_id: String,
        /// The status.
        status: StatusBody,
        /// Whether this is the task's final status.
        #[serde(rename = "final")]
        is_final: bool,
    },
    /// A reply chunk; `final: true` with `""` ends a streamed turn.
    Text {
        /// Task id.
        id: String,
        /// Chunk.
        text: String,
        /// End of the turn's text.
        #[serde(rename = "final")]
        is_final: bool,
    },
    /// A reasoning chunk.
    Thinking {
        /// Task id.
        id: String,
        /// Chunk.
        text: String,
        /// Always false.
        #[serde(rename = "final")]
        is_final: bool,
    },
    /// A driver started writing a tool call.
    ToolCallStarted {
        /// Task id.
        id: String,
        /// Call id.
        tool_call_id: String,
        /// Tool name.
        tool_name: String,
    },
    /// Cumulative input bytes of a call being written.
    ToolCallProgress {
        /// Task id.
        id: String,
        /// Call id.
        tool_call_id: String,
        /// Bytes so far.
        input_bytes: u64,
    },
    /// A finished tool call.
    Artifact {
        /// Task id.
        id: String,
        /// The result.
        artifact: ArtifactBody,
    },
    /// Replay asked for frames already evicted.
    Gap {
        /// Oldest id still held.
        first_available_id: u64,
    },
    /// This connection fell behind and lost frames.
    Lagged {
        /// How many.
        missed: u64,
    },
    /// First frame of `stream/watch`.
    ConnectionAck {
        /// Always `observer`.
        role: String,
        /// Conversation mode.
        conversation_mode: String,
    },
    /// The stream ends with the capsule still up.
    CapsuleClosed {},
    /// A request that cannot become a task.
    Error {
        /// What was wrong.
        error: String,
    },
}

impl Frame {
    /// The SSE event name.
    pub fn event_name(&self) -> &'static str {
        match self {
            Frame::Status { .. } => "status",
            Frame::Text { .. } => "text",
            Frame::Thinking { .. } => "thinking",
            Frame::ToolCallStarted { .. } => "tool-call-started",
            Frame::ToolCallProgress { .. } => "tool-call-progress",
            Frame::Artifact { .. } => "artifact",
            Frame::Gap { .. } => "gap",
            Frame::Lagged { .. } => "lagged",
            Frame::ConnectionAck { .. } => "connection-ack",
            Frame::CapsuleClosed {} => "capsule-closed",
            Frame::Error { .. } => "error",
        }
    }

    /// The text of [`Self::data`], written without building the value (see
    /// [`crate::frame_data`]).
    pub fn data_json(&self) -> String {
        crate::frame_data::data_json(self)
    }

    /// The frame's data object.
    pub fn data(&self) -> Value {
        match serde_json::to_value(self) {
            Ok(Value::Object(mut m)) => m.remove("data").unwrap_or(Value::Object(Default::default())),
            _ => Value::Null,
        }
    }

    /// Whether this frame gets a session-wide id and a place in the replay ring. `gap`,
    /// `lagged`, `connection-ack`, `capsule-closed` and `error` concern one connection and
    /// carry no id.
    pub fn is_id_bearing(&self) -> bool {
        !matches!(
            self,
            Frame::Gap { .. }
                | Frame::Lagged { .. }
                | Frame::ConnectionAck { .. }
                | Frame::CapsuleClosed {}
                | Frame::Error { .. }
        )
    }
}

/// A frame with its session-wide id.
#[derive(Debug, Clone, PartialEq)]
pub struct NumberedFrame {
    /// Strictly increasing from 1; `None` for per-connection frames.
    pub id: Option<u64>,
    /// The frame.
    pub frame: Frame,
}

impl NumberedFrame {
    /// The SSE wire form: `id:`, `event:`, one-line `data:`, blank line.
    pub fn to_sse(&self) -> String {
        sse_around(self.id, self.frame.event_name(), &self.frame.data_json())
    }

    /// The `--json` line form: `{"id":…, "event":…, "data":…}`.
    pub fn to_json_line(&self) -> Value {
        serde_json::json!({"id": self.id, "event": self.frame.event_name(), "data": self.frame.data()})
    }

    /// [`Self::to_json_line`] as text, byte for byte what serializing that value gives (its
    /// keys in order: `data`, `event`, `id`), built around one serialization of the data instead
    /// of a second tree around it. `frames.jsonl` and `--json` write this.
    pub fn json_line(&self) -> String {
        line_around(self.id, self.frame.event_name(), &self.frame.data_json())
    }
}

/// A numbered frame as the stream emitter publishes it. Its data object is serialized once,
/// when it is made, and every form a consumer writes (the journal's and `--json`'s line, an
/// SSE event) is built around that text; the replay ring and every subscriber share one
/// [`SharedFrame`] instead of a copy each. Reads as the [`NumberedFrame`] it holds.
#[derive(Debug, PartialEq)]
pub struct Published {
    numbered: NumberedFrame,
    /// Exactly as long as the text: the replay ring keeps up to 512 of these.
    data: Box<str>,
}

/// A published frame, shared by the replay ring and every subscriber.
pub type SharedFrame = std::sync::Arc<Published>;

impl Published {
    /// Publish a numbered frame: serialize its data now.
    pub fn new(numbered: NumberedFrame) -> SharedFrame {
        let data = numbered.frame.data_json().into_boxed_str();
        std::sync::Arc::new(Published { numbered, data })
    }

    /// A frame without an id (one that concerns a single connection).
    pub fn unnumbered(frame: Frame) -> SharedFrame {
        Self::new(NumberedFrame { id: None, frame })
    }

    /// The frame's data object, as JSON text (what [`Frame::data_json`] gives).
    pub fn data_json(&self) -> &str {
        &self.data
    }

    /// [`NumberedFrame::json_line`], around the data already serialized.
    pub fn json_line(&self) -> String {
        line_around(self.numbered.id, self.numbered.frame.event_name(), &self.data)
    }

    /// [`NumberedFrame::to_sse`], around the data already serialized.
    pub fn to_sse(&self) -> String {
        sse_around(self.numbered.id, self.numbered.frame.event_name(), &self.data)
    }
}

impl std::ops::Deref for Published {
    type Target = NumberedFrame;

    fn deref(&self) -> &NumberedFrame {
        &self.numbered
    }
}

/// `{"data":<data>,"event":"<event>","id":<id or null>}`.
fn line_around(id: Option<u64>, event: &str, data: &str) -> String {
    let mut out = String::with_capacity(data.len() + event.len() + 40);
    out.push_str("{\"data\":");
    out.push_str(data);
    // Event names are fixed lower-case words: nothing in them needs escaping.
    out.push_str(",\"event\":\"");
    out.push_str(event);
    out.push_str("\",\"id\":");
    match id {
        Some(id) => out.push_str(crate::journal_line::decimal(id, &mut [0; 20])),
        None => out.push_str("null"),
    }
    out.push('}');
    out
}

/// `id: <id>` (when there is one), `event:`, one-line `data:`, blank line.
fn sse_around(id: Option<u64>, event: &str, data: &str) -> String {
    let mut s = String::with_capacity(data.len() + event.len() + 40);
    if let Some(id) = id {
        s.push_str("id: ");
        s.push_str(crate::journal_line::decimal(id, &mut [0; 20]));
        s.push('\n');
    }
    for part in ["event: ", event, "\ndata: ", data, "\n\n"] {
        s.push_str(part);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn artifact_frames_carry_every_key_even_when_null() {
        let f = Frame::Artifact {
            id: "tsk_1".into(),
            artifact: ArtifactBody {
                tool_name: Some("files".into()),
                content: None,
                fence_source: None,
                tool_call_id: None,
                is_error: Some(false),
                duration_ms: None,
                exit_code: None,
                truncated: None,
                output_file: None,
            },
        };
        let d = f.data();
        for k in [
            "tool_name",
            "content",
            "fence_source",
            "tool_call_id",
            "is_error",
            "duration_ms",
            "exit_code",
            "truncated",
            "output_file",
        ] {
            assert!(d["artifact"].as_object().expect("object").contains_key(k), "missing {k}");
        }
    }

    /// One frame of every kind, with text that needs escaping and optional fields both ways.
    fn every_kind_of_frame() -> Vec<Frame> {
        let odd = "q\"b\\s\n\t\u{1}\u{7f} \u{e9}\u{1F600} </x>";
        let artifact = |some: bool| ArtifactBody {
            tool_name: some.then(|| odd.into()),
            content: some.then(|| format!("{odd} result")),
            fence_source: some.then(|| "json".into()),
            tool_call_id: some.then(|| "c1".into()),
            is_error: some.then_some(true),
            duration_ms: some.then_some(u64::MAX),
            exit_code: some.then_some(-3),
            truncated: some.then_some(false),
            output_file: some.then(|| "out/c1.txt".into()),
        };
        let status = |state, response: Option<&str>| Frame::Status {
            id: odd.into(),
            context_id: "ctx".into(),
            status: StatusBody { state, message: odd.into(), response: response.map(Into::into) },
            is_final: state.is_final(),
        };
        vec![
            status(TaskState::Working, None),
            status(TaskState::Completed, Some(odd)),
            status(TaskState::InputRequired, Some("")),
            Frame::Text { id: "t\"1".into(), text: odd.into(), is_final: true },
            Frame::Text { id: "t".into(), text: String::new(), is_final: false },
            Frame::Thinking { id: "t".into(), text: odd.into(), is_final: false },
            Frame::ToolCallStarted { id: "t".into(), tool_call_id: "c1".into(), tool_name: odd.into() },
            Frame::ToolCallProgress { id: "t".into(), tool_call_id: odd.into(), input_bytes: 12 },
            Frame::Artifact { id: "t".into(), artifact: artifact(true) },
            Frame::Artifact { id: "t".into(), artifact: artifact(false) },
            Frame::Gap { first_available_id: 5 },
            Frame::Lagged { missed: 0 },
            Frame::ConnectionAck { role: "observer".into(), conversation_mode: odd.into() },
            Frame::CapsuleClosed {},
            Frame::Error { error: odd.into() },
        ]
    }

    #[test]
    fn the_data_text_is_what_serializing_the_data_value_gives() {
        for frame in every_kind_of_frame() {
            assert_eq!(frame.data_json(), frame.data().to_string(), "{frame:?}");
        }
    }

    #[test]
    fn the_json_line_text_is_what_serializing_its_value_gives() {
        for frame in every_kind_of_frame() {
            for id in [Some(3), None] {
                let f = NumberedFrame { id, frame: frame.clone() };
                assert_eq!(f.json_line(), f.to_json_line().to_string(), "{f:?}");
            }
        }
    }

    #[test]
    fn a_published_frame_writes_the_same_line_and_event_as_the_frame_it_holds() {
        for frame in every_kind_of_frame() {
            for id in [Some(u64::MAX), Some(1), None] {
                let f = NumberedFrame { id, frame: frame.clone() };
                let published = Published::new(f.clone());
                assert_eq!(published.json_line(), f.to_json_line().to_string(), "{f:?}");
                assert_eq!(published.to_sse(), f.to_sse(), "{f:?}");
                assert_eq!(published.data_json(), f.frame.data().to_string(), "{f:?}");
                assert_eq!(**published, f, "it reads as the frame it holds");
            }
        }
    }

    #[test]
    fn sse_form_has_id_event_and_one_line_data() {
        let f =
            NumberedFrame { id: Some(7), frame: Frame::Text { id: "t".into(), text: "a\nb".into(), is_final: false } };
        let s = f.to_sse();
        assert_eq!(s, "id: 7\nevent: text\ndata: {\"final\":false,\"id\":\"t\",\"text\":\"a\\nb\"}\n\n");
    }
}
