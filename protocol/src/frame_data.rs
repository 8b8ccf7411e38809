//! A frame's data object written as JSON text directly, without building a `Value` first.
//!
//! The contract's text of a frame's data is what serializing [`Frame::data`] gives: a
//! `serde_json::Value` object, whose keys come out sorted. Every frame is written at least
//! twice (the journal and `--json` or a stream subscriber), so the tree in between was paid
//! for on every one. The views here borrow the frame's fields and declare them in that sorted
//! order, so serializing a view gives the same bytes with no tree and no map.
//!
//! Guarantees: [`data_json`] is byte for byte `frame.data().to_string()` for every kind of
//! frame (the test in `frame.rs` compares both for each variant, with text that needs escaping
//! and with every optional field present and absent).
//!
//! Deliberately not done: any other key order. Every frame and body is taken apart whole, so a
//! field added to one does not compile until it has its sorted place here.

use serde::Serialize;

use crate::frame::{ArtifactBody, Frame, StatusBody, TaskState};

/// The text of `frame`'s data object.
pub(crate) fn data_json(frame: &Frame) -> String {
    let mut out = Vec::with_capacity(128);
    write_data(&mut out, frame);
    // Only serde_json's output and ASCII went in.
    String::from_utf8(out).unwrap_or_else(|_| frame.data().to_string())
}

/// Append the text of `frame`'s data object to `out`.
pub(crate) fn write_data(out: &mut Vec<u8>, frame: &Frame) {
    let mark = out.len();
    // Serializing borrowed strings, numbers and bools into a `Vec` cannot fail; should it
    // ever, the `Value` form is written instead.
    if serde_json::to_writer(&mut *out, &View::of(frame)).is_err() {
        out.truncate(mark);
        out.extend_from_slice(frame.data().to_string().as_bytes());
    }
}

/// A frame's data, fields in the order their keys sort.
#[derive(Serialize)]
#[serde(untagged)]
enum View<'a> {
    Status {
        context_id: &'a str,
        #[serde(rename = "final")]
        is_final: bool,
        id: &'a str,
        status: Status<'a>,
    },
    /// `text` and `thinking`.
    Chunk {
        #[serde(rename = "final")]
        is_final: bool,
        id: &'a str,
        text: &'a str,
    },
    ToolCallStarted {
        id: &'a str,
        tool_call_id: &'a str,
        tool_name: &'a str,
    },
    ToolCallProgress {
        id: &'a str,
        input_bytes: u64,
        tool_call_id: &'a str,
    },
    Artifact {
        artifact: Artifact<'a>,
        id: &'a str,
    },
    Gap {
        first_available_id: u64,
    },
    Lagged {
        missed: u64,
    },
    ConnectionAck {
        conversation_mode: &'a str,
        role: &'a str,
    },
    Empty {},
    Error {
        error: &'a str,
    },
}

#[derive(Serialize)]
struct Status<'a> {
    message: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    response: Option<&'a str>,
    state: TaskState,
}

#[derive(Serialize)]
struct Artifact<'a> {
    content: Option<&'a str>,
    duration_ms: Option<u64>,
    exit_code: Option<i64>,
    fence_source: Option<&'a str>,
    is_error: Option<bool>,
    output_file: Option<&'a str>,
    tool_call_id: Option<&'a str>,
    tool_name: Option<&'a str>,
    truncated: Option<bool>,
}

impl<'a> View<'a> {
    fn of(frame: &'a Frame) -> Self {
        match frame {
            Frame::Status { id, context_id, status, is_final } => {
                let StatusBody { state, message, response } = status;
                View::Status {
                    context_id,
                    is_final: *is_final,
                    id,
                    status: Status { message, response: response.as_deref(), state: *state },
                }
            }
            Frame::Text { id, text, is_final } | Frame::Thinking { id, text, is_final } => {
                View::Chunk { is_final: *is_final, id, text }
            }
            Frame::ToolCallStarted { id, tool_call_id, tool_name } => {
                View::ToolCallStarted { id, tool_call_id, tool_name }
            }
            Frame::ToolCallProgress { id, tool_call_id, input_bytes } => {
                View::ToolCallProgress { id, input_bytes: *input_bytes, tool_call_id }
            }
            Frame::Artifact { id, artifact } => View::Artifact { artifact: Artifact::of(artifact), id },
            Frame::Gap { first_available_id } => View::Gap { first_available_id: *first_available_id },
            Frame::Lagged { missed } => View::Lagged { missed: *missed },
            Frame::ConnectionAck { role, conversation_mode } => View::ConnectionAck { conversation_mode, role },
            Frame::CapsuleClosed {} => View::Empty {},
            Frame::Error { error } => View::Error { error },
        }
    }
}

impl<'a> Artifact<'a> {
    fn of(a: &'a ArtifactBody) -> Self {
        // Taken apart whole, so that a field added to the body does not compile until it has
        // its place here.
        let ArtifactBody {
            tool_name,
            content,
            fence_source,
            tool_call_id,
            is_error,
            duration_ms,
            exit_code,
            truncated,
            output_file,
        } = a;
        Artifact {
            content: content.as_deref(),
            duration_ms: *duration_ms,
            exit_code: *exit_code,
            fence_source: fence_source.as_deref(),
            is_error: *is_error,
            output_file: output_file.as_deref(),
            tool_call_id: tool_call_id.as_deref(),
            tool_name: tool_name.as_deref(),
            truncated: *truncated,
        }
    }
}
