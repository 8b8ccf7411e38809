//! The agent loop actor: owns the conversation, the running task and the settings; drives
//! turns (CONTRACT §9).
//!
//! A turn is asynchronous: the loop sends the request to the gateway from a spawned task and
//! gets the answer back as [`LoopMsg::InferenceDone`], so its mailbox stays open while a
//! provider streams. Tool calls run in order the same way ([`LoopMsg::ToolDone`]). Answers
//! carry the attempt number they belong to; a stale answer (from an attempt that already
//! ended) is dropped.
//!
//! Ordering by construction: the gateway flushes progress frames before it answers, so the
//! `artifact` frames the loop emits after `InferenceDone` come after them; the final `status`
//! is emitted after the trace and conversation are flushed, and exactly once per attempt
//! (the running task is taken out of the state when it finishes).

mod task;

use capsule_protocol::frame::{Frame, StatusBody, TaskState};
use capsule_protocol::neutral::{Message, ToolSpec};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::path::PathBuf;

use crate::gateway::InferReply;
use crate::session::TaskOutcome;
use crate::tools::ToolRunReply;
pub use task::Running;

/// Messages.
pub enum LoopMsg {
    /// Submit a task (a user message); answered when it ends.
    Submit {
        /// The text.
        text: String,
        /// Context id to continue, when any.
        context_id: Option<String>,
        /// Answer.
        reply: RpcReplyPort<TaskOutcome>,
    },
    /// A driver call ended.
    InferenceDone {
        /// Attempt it belongs to.
        attempt: u64,
        /// The answer (an error when the gateway was unreachable).
        reply: Box<InferReply>,
    },
    /// A tool call ended.
    ToolDone {
        /// Attempt it belongs to.
        attempt: u64,
        /// The answer.
        reply: ToolRunReply,
    },
    /// Write `session_end` and flush; answered when durable.
    EndSession(RpcReplyPort<()>),
}

/// What the loop needs to know about the capsule (fixed for the session).
#[derive(Debug, Clone)]
pub struct LoopConfig {
    /// Session id.
    pub session_id: String,
    /// Capsule name.
    pub capsule_name: String,
    /// Capsule version.
    pub capsule_version: String,
    /// Primary model.
    pub model: String,
    /// Primary driver artifact.
    pub driver: String,
    /// Turns per task.
    pub max_turns: u32,
    /// Output cap per call.
    pub max_tokens: u32,
    /// System prompt.
    pub system: String,
    /// Tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// Where `result.txt` goes.
    pub out_dir: PathBuf,
    /// Upper bound on one driver call as seen by the loop (the driver's deadline plus margin).
    pub call_timeout: std::time::Duration,
}

/// State.
pub struct LoopState {
    pub(crate) config: LoopConfig,
    pub(crate) conversation: Vec<Message>,
    pub(crate) running: Option<Running>,
    pub(crate) attempts: u64,
}

/// The actor.
pub struct AgentLoop;

impl Actor for AgentLoop {
    type Msg = LoopMsg;
    type State = LoopState;
    type Arguments = LoopConfig;

    async fn pre_start(&self, _myself: ActorRef<LoopMsg>, config: LoopConfig) -> Result<LoopState, ActorProcessingErr> {
        Ok(LoopState { config, conversation: Vec::new(), running: None, attempts: 0 })
    }

    async fn handle(&self, myself: ActorRef<LoopMsg>, msg: LoopMsg, state: &mut LoopState) -> Result<(), ActorProcessingErr> {
        match msg {
            LoopMsg::Submit { text, context_id, reply } => {
                if state.running.is_some() {
                    let outcome = TaskOutcome::rejected("the capsule is busy with another task; submit again when it ends");
                    state.emit(Frame::Status {
                        id: outcome.task_id.clone(),
                        context_id: context_id.unwrap_or_default(),
                        status: StatusBody { state: TaskState::Rejected, message: outcome.message.clone(), response: None },
                        is_final: true,
                    });
                    let _ = reply.send(outcome);
                    return Ok(());
                }
                state.start_task(&myself, text, context_id, reply).await;
            }
            LoopMsg::InferenceDone { attempt, reply } => {
                if state.running.as_ref().is_some_and(|r| r.attempt == attempt) {
                    state.on_inference(&myself, *reply).await;
                }
            }
            LoopMsg::ToolDone { attempt, reply } => {
                if state.running.as_ref().is_some_and(|r| r.attempt == attempt) {
                    state.on_tool_done(&myself, reply).await;
                }
            }
            LoopMsg::EndSession(reply) => {
                state.end_session().await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}
