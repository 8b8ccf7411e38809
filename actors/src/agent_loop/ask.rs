//! A person in the loop: a tool's `request-input` (`murmur:task/task`) puts its task into
//! `input-required` until a client answers it (an A2A message with the task's `taskId`).
//!
//! - The tool's call waits inside its store; that wait is kept off the tool's deadline (the
//!   runtime's `Paused`), so a person may take their time.
//! - Both steps are journaled before they take effect: `input_required` (the prompt) before the
//!   task's state changes and its `input-required` status frame goes out, `input_provided`
//!   before the tool gets the answer. A step that cannot be journaled fails the task.
//! - A task that ends while waiting (cancel, session end) drops the answer channel: the tool
//!   gets an `error:` string and its late result is dropped as stale.
//! - `lifecycle.input_timeout_secs` bounds the wait: past it the task fails (`E-RUN-091`).

use capsule_protocol::frame::{Frame, StatusBody, TaskState};
use capsule_protocol::trace::TraceKind;
use ractor::ActorRef;
use serde_json::json;
use tokio::sync::oneshot;

use super::{LoopMsg, LoopState, TaskRecord};
use capsule_runtime::{GuestEvents, InputAnswer};

/// Why an answer was not taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum InputRefusal {
    /// The task is not waiting for input.
    #[error("task `{task_id}` is {state:?}, not waiting for input")]
    NotWaiting {
        /// The task.
        task_id: String,
        /// Its state.
        state: TaskState,
    },
    /// The answer could not be journaled, so it was not given to the tool.
    #[error("the answer could not be journaled, so the tool did not get it: {0}")]
    Unjournaled(String),
}

/// The `GuestEvents` of one tool call: only `request-input` does anything; it asks the loop
/// that started the call, for that call's attempt.
pub struct InputAsker {
    loop_ref: ActorRef<LoopMsg>,
    attempt: u64,
}

impl InputAsker {
    /// For a tool call of `attempt`.
    pub fn new(loop_ref: ActorRef<LoopMsg>, attempt: u64) -> InputAsker {
        InputAsker { loop_ref, attempt }
    }
}

impl GuestEvents for InputAsker {
    fn chunk(&self, _: String) {}
    fn thinking(&self, _: String) {}
    fn tool_call_started(&self, _: String, _: String) {}
    fn tool_call_input_bytes(&self, _: String, _: u64) {}

    fn request_input(&self, prompt: String) -> InputAnswer {
        let (answer, rx) = oneshot::channel();
        let asked = self.loop_ref.cast(LoopMsg::InputRequired { attempt: self.attempt, prompt, answer });
        Box::pin(async move {
            if asked.is_err() {
                return "error: the agent loop is not running; no one can be asked".to_string();
            }
            rx.await.unwrap_or_else(|_| "error: the task ended before anyone answered".to_string())
        })
    }
}

impl LoopState {
    fn set_state(&mut self, task_id: &str, state: TaskState, message: &str) -> Option<TaskRecord> {
        let rec = self.tasks.get_mut(task_id)?;
        rec.state = state;
        rec.message = message.to_string();
        let rec = rec.clone();
        self.emit(Frame::Status {
            id: rec.id.clone(),
            context_id: rec.context_id.clone(),
            status: StatusBody { state, message: message.to_string(), response: None },
            is_final: false,
        });
        Some(rec)
    }

    /// The running tool of `attempt` asks a person; the task waits.
    pub(crate) async fn on_input_required(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        attempt: u64,
        prompt: String,
        answer: oneshot::Sender<String>,
    ) {
        let Some(task_id) = self.running.as_ref().filter(|r| r.attempt == attempt).map(|r| r.task_id.clone()) else {
            return;
        };
        let asked = json!({"task_id": task_id, "prompt": prompt});
        if let Err(e) = self.journal(Vec::new(), vec![self.event(TraceKind::InputRequired, asked)]).await {
            return self.fail_unjournaled(e).await;
        }
        self.asked += 1;
        if let Some(r) = self.running.as_mut() {
            r.waiting = Some(answer);
        }
        self.set_state(&task_id, TaskState::InputRequired, &prompt);
        if let Some(limit) = self.config.input_timeout {
            let me = myself.clone();
            let asked = self.asked;
            tokio::spawn(async move {
                tokio::time::sleep(limit).await;
                let _ = me.cast(LoopMsg::InputTimedOut { attempt, asked });
            });
        }
    }

    /// The wait `asked` of `attempt` ran out: the task fails, unless it was answered meanwhile.
    pub(crate) async fn on_input_timeout(&mut self, attempt: u64, asked: u64) {
        let still = self.running.as_ref().is_some_and(|r| r.attempt == attempt && r.waiting.is_some());
        if !still || asked != self.asked {
            return;
        }
        let secs = self.config.input_timeout.map_or(0, |d| d.as_secs());
        let why = format!(
            "{code}: input-timeout: no one answered within {secs} s (lifecycle.input_timeout_secs)",
            code = capsule_protocol::Code::InputTimeout
        );
        self.finish(capsule_protocol::trace::ExitStatus::Failed, why).await;
    }

    /// A client answers `task_id`: `None` when no such task, the record (now `working`) when the
    /// answer reached the tool.
    pub(crate) async fn provide_input(
        &mut self,
        task_id: &str,
        text: String,
    ) -> Option<Result<TaskRecord, InputRefusal>> {
        let rec = self.tasks.get(task_id)?.clone();
        let waiting = self.running.as_ref().is_some_and(|r| r.task_id == task_id && r.waiting.is_some());
        if !waiting {
            return Some(Err(InputRefusal::NotWaiting { task_id: task_id.to_string(), state: rec.state }));
        }
        let given = json!({"task_id": task_id, "bytes": text.len()});
        if let Err(e) = self.journal(Vec::new(), vec![self.event(TraceKind::InputProvided, given)]).await {
            return Some(Err(InputRefusal::Unjournaled(e.to_string())));
        }
        if let Some(tx) = self.running.as_mut().and_then(|r| r.waiting.take()) {
            let _ = tx.send(text);
        }
        self.set_state(task_id, TaskState::Working, "input received").map(Ok)
    }
}
