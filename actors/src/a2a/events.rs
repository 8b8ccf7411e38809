//! Murmur frames of one task, turned into A2A stream events (the table in docs/protocol.md),
//! and folded into the artifacts a `Task` snapshot carries.
//!
//! - Streamed text is one artifact per inference turn (`<task>-text-<turn>`, name `response`):
//!   its first chunk has `append: false`, later chunks `append: true`, and the turn's end is an
//!   empty chunk with `lastChunk: true`. Thinking is the same, as `<task>-thinking-<turn>`.
//! - A tool call is one artifact, `<task>-tool-<call id>` named after the tool: a data part
//!   when the driver starts writing it, then its result (data part + text part) appended with
//!   `lastChunk: true`.
//! - Tool-call input progress is a `working` status update with the byte count in metadata.
//! - Status frames are status updates; the final one ends the stream, and so does
//!   `input-required` (the task is interrupted until a client answers it with a new message).

use capsule_protocol::frame::{ArtifactBody, Frame, TaskState};
use serde_json::{Value, json};
use std::collections::HashSet;

use super::shape::Dialect;

/// What one frame became.
pub enum Mapped {
    /// Not this task's, or nothing an A2A client is told.
    Nothing,
    /// A stream result.
    Event(Value),
    /// The task's final status update, or `input-required`: send it, then end the stream.
    Final(Value),
}

/// Per-stream state: which turn the task is in and which artifacts are open.
pub struct TaskEvents {
    dialect: Dialect,
    task_id: String,
    context_id: String,
    turn: u32,
    text_open: bool,
    thinking_open: bool,
    tools_started: HashSet<String>,
    /// The last state a status frame reported (for a snapshot).
    pub state: Option<(TaskState, String)>,
}

impl TaskEvents {
    /// A mapper for `task_id`'s frames.
    pub fn new(dialect: Dialect, task_id: &str, context_id: &str) -> TaskEvents {
        TaskEvents {
            dialect,
            task_id: task_id.to_string(),
            context_id: context_id.to_string(),
            turn: 0,
            text_open: false,
            thinking_open: false,
            tools_started: HashSet::new(),
            state: None,
        }
    }

    fn mine(&self, id: &str) -> bool {
        id == self.task_id
    }

    fn artifact_update(&self, id: String, name: &str, parts: Vec<Value>, append: bool, last: bool) -> Mapped {
        let d = self.dialect;
        let a = d.artifact(&id, Some(name), parts);
        Mapped::Event(d.artifact_update(&self.task_id, &self.context_id, a, append, last))
    }

    fn working_with(&self, metadata: Value) -> Mapped {
        let d = self.dialect;
        let st = d.status(&self.task_id, &self.context_id, TaskState::Working, None);
        Mapped::Event(d.status_update(&self.task_id, &self.context_id, st, Some(json!({"murmur": metadata}))))
    }

    /// The A2A event for one frame.
    pub fn map(&mut self, f: &Frame) -> Mapped {
        let d = self.dialect;
        match f {
            Frame::Status { id, status, is_final, .. } if self.mine(id) => {
                let text = status.response.as_deref().unwrap_or(&status.message);
                self.state = Some((status.state, text.to_string()));
                let st = d.status(&self.task_id, &self.context_id, status.state, Some(text));
                let e = d.status_update(&self.task_id, &self.context_id, st, None);
                if *is_final || status.state == TaskState::InputRequired { Mapped::Final(e) } else { Mapped::Event(e) }
            }
            Frame::Text { id, text, is_final: false } if self.mine(id) => {
                let append = std::mem::replace(&mut self.text_open, true);
                self.artifact_update(
                    format!("{}-text-{}", self.task_id, self.turn),
                    "response",
                    vec![d.text_part(text)],
                    append,
                    false,
                )
            }
            Frame::Text { id, is_final: true, .. } if self.mine(id) => {
                let open = std::mem::replace(&mut self.text_open, false);
                let turn = self.turn;
                self.turn += 1;
                self.thinking_open = false;
                if !open {
                    return Mapped::Nothing;
                }
                self.artifact_update(
                    format!("{}-text-{turn}", self.task_id),
                    "response",
                    vec![d.text_part("")],
                    true,
                    true,
                )
            }
            Frame::Thinking { id, text, .. } if self.mine(id) => {
                let append = std::mem::replace(&mut self.thinking_open, true);
                self.artifact_update(
                    format!("{}-thinking-{}", self.task_id, self.turn),
                    "thinking",
                    vec![d.text_part(text)],
                    append,
                    false,
                )
            }
            Frame::ToolCallStarted { id, tool_call_id, tool_name } if self.mine(id) => {
                self.tools_started.insert(tool_call_id.clone());
                let data = json!({"toolCallId": tool_call_id, "toolName": tool_name, "state": "started"});
                self.artifact_update(
                    format!("{}-tool-{tool_call_id}", self.task_id),
                    tool_name,
                    vec![d.data_part(data)],
                    false,
                    false,
                )
            }
            Frame::ToolCallProgress { id, tool_call_id, input_bytes } if self.mine(id) => {
                self.working_with(json!({"toolCallId": tool_call_id, "inputBytes": input_bytes}))
            }
            Frame::Artifact { id, artifact } if self.mine(id) => self.tool_result(artifact),
            Frame::Gap { first_available_id } => {
                self.working_with(json!({"gap": {"firstAvailableId": first_available_id}}))
            }
            Frame::Lagged { missed } => self.working_with(json!({"lagged": {"missed": missed}})),
            _ => Mapped::Nothing,
        }
    }

    fn tool_result(&mut self, a: &ArtifactBody) -> Mapped {
        let d = self.dialect;
        let call = a.tool_call_id.clone().unwrap_or_else(|| "result".into());
        let name = a.tool_name.clone().unwrap_or_else(|| "tool".into());
        let mut data =
            json!({"toolCallId": call, "toolName": name, "state": "finished", "isError": a.is_error.unwrap_or(false)});
        for (k, v) in [
            ("durationMs", a.duration_ms.map(Value::from)),
            ("exitCode", a.exit_code.map(Value::from)),
            ("truncated", a.truncated.map(Value::from)),
            ("outputFile", a.output_file.clone().map(Value::from)),
        ] {
            if let Some(v) = v {
                data[k] = v;
            }
        }
        let mut parts = vec![d.data_part(data)];
        if let Some(c) = &a.content {
            parts.push(d.text_part(c));
        }
        let append = self.tools_started.contains(&call);
        self.artifact_update(format!("{}-tool-{call}", self.task_id), &name, parts, append, true)
    }
}

/// Artifacts as a client that applies every update in order holds them: an update without
/// `append` replaces the artifact's parts, one with `append` adds to them. Adjacent text parts
/// are joined, so a snapshot carries one text part per streamed turn.
#[derive(Default)]
pub struct Folded {
    artifacts: Vec<Value>,
}

impl Folded {
    /// Apply one stream result (anything but an artifact update is ignored).
    pub fn apply(&mut self, event: &Value) {
        let update = event.get("artifactUpdate").unwrap_or(event);
        let Some(artifact) = update.get("artifact") else { return };
        let append = update["append"].as_bool().unwrap_or(false);
        let id = &artifact["artifactId"];
        match self.artifacts.iter_mut().find(|a| &a["artifactId"] == id) {
            Some(held) if append => {
                let parts = artifact["parts"].as_array().cloned().unwrap_or_default();
                if let Some(list) = held["parts"].as_array_mut() {
                    for p in parts {
                        join_or_push(list, p);
                    }
                }
            }
            Some(held) => *held = artifact.clone(),
            None => self.artifacts.push(artifact.clone()),
        }
    }

    /// The artifacts so far.
    pub fn into_artifacts(self) -> Vec<Value> {
        self.artifacts
    }
}

fn join_or_push(list: &mut Vec<Value>, p: Value) {
    if let (Some(last), Some(more)) = (list.last_mut(), p.get("text").and_then(Value::as_str))
        && let Some(held) = last.get("text").and_then(Value::as_str)
    {
        last["text"] = Value::String(format!("{held}{more}"));
        return;
    }
    list.push(p);
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_protocol::frame::StatusBody;

    fn text(t: &str, fin: bool) -> Frame {
        Frame::Text { id: "t".into(), text: t.into(), is_final: fin }
    }

    #[test]
    fn a_turns_text_is_one_artifact_appended_to_and_closed_with_last_chunk() {
        let mut m = TaskEvents::new(Dialect::V1, "t", "c");
        let mut folded = Folded::default();
        let mut flags = Vec::new();
        for f in [text("Hel", false), text("lo", false), text("", true), text("again", false)] {
            let Mapped::Event(e) = m.map(&f) else { panic!("an event") };
            let u = &e["artifactUpdate"];
            flags.push((
                u["artifact"]["artifactId"].as_str().map(String::from),
                u["append"].clone(),
                u["lastChunk"].clone(),
            ));
            folded.apply(&e);
        }
        let id = |n: u32| Some(format!("t-text-{n}"));
        assert_eq!(
            flags,
            vec![
                (id(0), json!(false), json!(false)),
                (id(0), json!(true), json!(false)),
                (id(0), json!(true), json!(true)),
                (id(1), json!(false), json!(false)),
            ]
        );
        let arts = folded.into_artifacts();
        assert_eq!(arts[0]["parts"], json!([{"text": "Hello"}]));
        assert_eq!(arts[1]["parts"], json!([{"text": "again"}]));
    }

    #[test]
    fn another_tasks_frames_map_to_nothing_and_the_final_status_ends_the_stream() {
        let mut m = TaskEvents::new(Dialect::V03, "t", "c");
        let other = Frame::Text { id: "u".into(), text: "x".into(), is_final: false };
        assert!(matches!(m.map(&other), Mapped::Nothing));
        let done = Frame::Status {
            id: "t".into(),
            context_id: "c".into(),
            status: StatusBody {
                state: TaskState::Completed,
                message: "completed".into(),
                response: Some("hi".into()),
            },
            is_final: true,
        };
        let Mapped::Final(e) = m.map(&done) else { panic!("final") };
        assert_eq!(e["final"], true);
        assert_eq!(e["status"]["message"]["parts"][0]["text"], "hi");
    }
}
