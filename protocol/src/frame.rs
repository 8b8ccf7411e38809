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
        let mut s = String::new();
        if let Some(id) = self.id {
            s.push_str(&format!("id: {id}\n"));
        }
        s.push_str(&format!("event: {}\ndata: {}\n\n", self.frame.event_name(), self.frame.data_json()));
        s
    }

    /// The `--json` line form: `{"id":…, "event":…, "data":…}`.
    pub fn to_json_line(&self) -> Value {
        serde_json::json!({"id": self.id, "event": self.frame.event_name(), "data": self.frame.data()})
    }

    /// [`Self::to_json_line`] as text, byte for byte what serializing that value gives (its
    /// keys in order: `data`, `event`, `id`), built around one serialization of the data instead
    /// of a second tree around it. `frames.jsonl` and `--json` write this.
    pub fn json_line(&self) -> String {
        let mut out = Vec::with_capacity(160);
        out.extend_from_slice(b"{\"data\":");
        crate::frame_data::write_data(&mut out, &self.frame);
        // Event names are fixed lower-case words: nothing in them needs escaping.
        out.extend_from_slice(b",\"event\":\"");
        out.extend_from_slice(self.frame.event_name().as_bytes());
        out.extend_from_slice(b"\",\"id\":");
        match self.id {
            Some(id) => out.extend_from_slice(id.to_string().as_bytes()),
            None => out.extend_from_slice(b"null"),
        }
        out.push(b'}');
        // Only serde_json's output and ASCII went in.
        String::from_utf8(out).unwrap_or_else(|_| self.to_json_line().to_string())
    }
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
    fn sse_form_has_id_event_and_one_line_data() {
        let f =
            NumberedFrame { id: Some(7), frame: Frame::Text { id: "t".into(), text: "a\nb".into(), is_final: false } };
        let s = f.to_sse();
        assert_eq!(s, "id: 7\nevent: text\ndata: {\"final\":false,\"id\":\"t\",\"text\":\"a\\nb\"}\n\n");
    }
}
