//! A2A's JSON shapes in the two protocol versions the endpoint speaks. Plain functions from
//! this runtime's task records and frame contents to `Task`, `Message`, `Part`, `Artifact`,
//! `TaskStatusUpdateEvent` and `TaskArtifactUpdateEvent`.
//!
//! The versions differ only in spelling: v1.0 is the protobuf JSON form (`TASK_STATE_WORKING`,
//! `ROLE_AGENT`, parts without `kind`, stream events wrapped as `{"statusUpdate": …}`), v0.3
//! is the older form (`working`, `agent`, parts and objects with a `kind`, `final` on status
//! updates).

use capsule_protocol::frame::TaskState;
use serde_json::{Value, json};

use crate::agent_loop::TaskRecord;

/// Which A2A protocol version a request (and so its answer) uses; told apart by method name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// A2A v1.0 (`SendMessage`, `GetTask`, …).
    V1,
    /// A2A v0.3 (`message/send`, `tasks/get`, …).
    V03,
}

impl Dialect {
    /// The wire name of a task state.
    pub fn state(self, s: TaskState) -> &'static str {
        match (self, s) {
            (Dialect::V1, TaskState::Working) => "TASK_STATE_WORKING",
            (Dialect::V1, TaskState::InputRequired) => "TASK_STATE_INPUT_REQUIRED",
            (Dialect::V1, TaskState::Completed) => "TASK_STATE_COMPLETED",
            (Dialect::V1, TaskState::Failed) => "TASK_STATE_FAILED",
            (Dialect::V1, TaskState::Canceled) => "TASK_STATE_CANCELED",
            (Dialect::V1, TaskState::Rejected) => "TASK_STATE_REJECTED",
            (Dialect::V03, TaskState::Working) => "working",
            (Dialect::V03, TaskState::InputRequired) => "input-required",
            (Dialect::V03, TaskState::Completed) => "completed",
            (Dialect::V03, TaskState::Failed) => "failed",
            (Dialect::V03, TaskState::Canceled) => "canceled",
            (Dialect::V03, TaskState::Rejected) => "rejected",
        }
    }

    /// A task state from its wire name in this dialect (`ListTasks` filters by it).
    pub fn parse_state(self, name: &str) -> Option<TaskState> {
        [
            TaskState::Working,
            TaskState::InputRequired,
            TaskState::Completed,
            TaskState::Failed,
            TaskState::Canceled,
            TaskState::Rejected,
        ]
        .into_iter()
        .find(|s| self.state(*s) == name)
    }

    /// The wire name of the user role (what a sent message must carry, when it names one).
    pub fn user_role(self) -> &'static str {
        match self {
            Dialect::V1 => "ROLE_USER",
            Dialect::V03 => "user",
        }
    }

    fn agent_role(self) -> &'static str {
        match self {
            Dialect::V1 => "ROLE_AGENT",
            Dialect::V03 => "agent",
        }
    }

    /// A text part.
    pub fn text_part(self, text: &str) -> Value {
        match self {
            Dialect::V1 => json!({"text": text}),
            Dialect::V03 => json!({"kind": "text", "text": text}),
        }
    }

    /// A structured-data part.
    pub fn data_part(self, data: Value) -> Value {
        match self {
            Dialect::V1 => json!({"data": data}),
            Dialect::V03 => json!({"kind": "data", "data": data}),
        }
    }

    /// An agent message carrying one text part, tied to its task.
    pub fn agent_message(self, task_id: &str, context_id: &str, message_id: String, text: &str) -> Value {
        let mut m = json!({
            "messageId": message_id, "role": self.agent_role(), "parts": [self.text_part(text)],
            "taskId": task_id, "contextId": context_id,
        });
        if self == Dialect::V03 {
            m["kind"] = json!("message");
        }
        m
    }

    /// A `TaskStatus`: the state and, when there is one, the agent's message for it.
    pub fn status(self, task_id: &str, context_id: &str, state: TaskState, text: Option<&str>) -> Value {
        let mut s = json!({"state": self.state(state)});
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            s["message"] = self.agent_message(task_id, context_id, format!("{task_id}-status"), t);
        }
        s
    }

    /// A `Task` from this runtime's record: its status message is the response when it
    /// completed, otherwise the record's message; a completed task carries its response as the
    /// `response` artifact too.
    pub fn task(self, r: &TaskRecord, artifacts: Vec<Value>) -> Value {
        let text = r.response.as_deref().unwrap_or(&r.message);
        let mut artifacts = artifacts;
        if artifacts.is_empty()
            && let Some(resp) = &r.response
        {
            artifacts.push(self.artifact("response", Some("response"), vec![self.text_part(resp)]));
        }
        let mut t = json!({
            "id": r.id, "contextId": r.context_id,
            "status": self.status(&r.id, &r.context_id, r.state, Some(text)),
        });
        if !artifacts.is_empty() {
            t["artifacts"] = Value::Array(artifacts);
        }
        if self == Dialect::V03 {
            t["kind"] = json!("task");
        }
        t
    }

    /// An `Artifact`.
    pub fn artifact(self, id: &str, name: Option<&str>, parts: Vec<Value>) -> Value {
        let mut a = json!({"artifactId": id, "parts": parts});
        if let Some(n) = name {
            a["name"] = json!(n);
        }
        a
    }

    /// A `TaskStatusUpdateEvent`, as a stream result.
    pub fn status_update(self, task_id: &str, context_id: &str, status: Value, metadata: Option<Value>) -> Value {
        // v0.3's `final` ends the stream: at a final state, and at `input-required`, where the
        // client answers with a new message.
        let is_final = status["state"]
            .as_str()
            .and_then(|s| self.parse_state(s))
            .is_some_and(|s| s.is_final() || s == TaskState::InputRequired);
        let mut e = json!({"taskId": task_id, "contextId": context_id, "status": status});
        if let Some(m) = metadata {
            e["metadata"] = m;
        }
        match self {
            Dialect::V1 => json!({"statusUpdate": e}),
            Dialect::V03 => {
                e["kind"] = json!("status-update");
                e["final"] = json!(is_final);
                e
            }
        }
    }

    /// A `TaskArtifactUpdateEvent`, as a stream result.
    pub fn artifact_update(self, task_id: &str, context_id: &str, artifact: Value, append: bool, last: bool) -> Value {
        let mut e = json!({
            "taskId": task_id, "contextId": context_id, "artifact": artifact,
            "append": append, "lastChunk": last,
        });
        match self {
            Dialect::V1 => json!({"artifactUpdate": e}),
            Dialect::V03 => {
                e["kind"] = json!("artifact-update");
                e
            }
        }
    }

    /// A whole `Task` as a stream result (the first event of a stream).
    pub fn task_event(self, task: Value) -> Value {
        match self {
            Dialect::V1 => json!({"task": task}),
            Dialect::V03 => task,
        }
    }

    /// The result of a non-streaming send: the task.
    pub fn send_result(self, task: Value) -> Value {
        self.task_event(task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_round_trips_through_its_wire_name_in_both_versions() {
        for d in [Dialect::V1, Dialect::V03] {
            for s in [
                TaskState::Working,
                TaskState::InputRequired,
                TaskState::Completed,
                TaskState::Failed,
                TaskState::Canceled,
                TaskState::Rejected,
            ] {
                assert_eq!(d.parse_state(d.state(s)), Some(s), "{d:?} {s:?}");
            }
        }
        assert_eq!(Dialect::V1.parse_state("completed"), None, "v0.3 spelling is not v1.0");
    }

    #[test]
    fn a_v03_final_status_update_says_final_and_a_v1_one_is_wrapped() {
        let st = Dialect::V03.status("t", "c", TaskState::Completed, Some("done"));
        let e = Dialect::V03.status_update("t", "c", st, None);
        assert_eq!((e["kind"].as_str(), e["final"].as_bool()), (Some("status-update"), Some(true)));
        assert_eq!(e["status"]["message"]["parts"][0], json!({"kind": "text", "text": "done"}));
        let st = Dialect::V1.status("t", "c", TaskState::Working, None);
        let e = Dialect::V1.status_update("t", "c", st, None);
        assert_eq!(e["statusUpdate"]["status"], json!({"state": "TASK_STATE_WORKING"}));
        assert!(e["statusUpdate"].get("final").is_none(), "v1.0 has no `final`");
    }
}
