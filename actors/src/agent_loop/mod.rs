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

mod ask;
pub(crate) mod call;
mod compaction;
mod context;
mod hooks;
mod intake;
mod lines;
mod peers;
mod resume;
mod settings;
mod spans;
mod task;
mod tool_calls;
mod unacked;

pub use ask::InputRefusal;
pub use compaction::CompactionConfig;
pub use hooks::HookRoute;
pub use resume::{INTERRUPTED, ResumeSeed, read_conversation};

use crate::control::{ControlError, Principal, SettingChange};
use capsule_protocol::frame::TaskState;
use capsule_protocol::manifest::TaskAcceptance;
use capsule_protocol::neutral::ToolSpec;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::path::PathBuf;

use crate::gateway::InferReply;
use crate::tools::ToolRunReply;
pub use task::Running;

/// Who submitted a task: `lifecycle.task_acceptance: none` accepts only the launch task.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Origin {
    /// The task given at launch (`capsule run --task`).
    Launch,
    /// A client of the door.
    Door,
}

/// A task as `tasks/get` reports it.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct TaskRecord {
    /// Task id.
    pub id: String,
    /// Context id.
    pub context_id: String,
    /// Current state.
    pub state: TaskState,
    /// Status message.
    pub message: String,
    /// The reply, once completed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub response: Option<String>,
}

/// How a task ended, as its submitter sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct TaskOutcome {
    /// Task id.
    pub task_id: String,
    /// Context id.
    pub context_id: String,
    /// Exit status.
    pub exit_status: capsule_protocol::trace::ExitStatus,
    /// The reply (ok) or the error message.
    pub message: String,
    /// Where `result.txt` was written.
    pub result_path: std::path::PathBuf,
}

/// A task as submitted.
#[derive(Debug, Clone)]
pub struct TaskRequest {
    /// The text.
    pub text: String,
    /// Context id to continue, when any.
    pub context_id: Option<String>,
    /// Who submits.
    pub origin: Origin,
    /// The client's W3C `traceparent`, when it sent one.
    pub traceparent: Option<String>,
}

/// Answered when a submitted task is accepted (or rejected), before it runs.
pub type Accepted = tokio::sync::oneshot::Sender<TaskRecord>;

/// What the agent loop is asked: tasks (submit, get, cancel, resume), the answers of the calls
/// it started, settings from the control surface, and the end of the session.
pub enum LoopMsg {
    /// Submit a task (a user message); `reply` is answered when it ends, `accepted` as soon as
    /// it is accepted, queued or rejected.
    Submit {
        /// The task.
        request: TaskRequest,
        /// Answer when accepted.
        accepted: Option<Accepted>,
        /// Answer when ended.
        reply: Option<RpcReplyPort<TaskOutcome>>,
    },
    /// A task's record (`tasks/get`).
    GetTask {
        /// Task id.
        id: String,
        /// Answer (`None` for an unknown id).
        reply: RpcReplyPort<Option<TaskRecord>>,
    },
    /// Every task this session knows, newest first (ids are time-ordered UUIDv7s).
    ListTasks(RpcReplyPort<Vec<TaskRecord>>),
    /// The id of the running task when it waits for a person (`input-required`).
    Waiting(RpcReplyPort<Option<String>>),
    /// The running tool of `attempt` asks a person (`request-input`); `answer` gets the reply.
    InputRequired {
        /// Attempt the tool call belongs to.
        attempt: u64,
        /// What the tool asks.
        prompt: String,
        /// Where the answer goes.
        answer: tokio::sync::oneshot::Sender<String>,
    },
    /// The wait for input of `attempt` ran past `lifecycle.input_timeout_secs`.
    InputTimedOut {
        /// Attempt the wait belongs to.
        attempt: u64,
        /// Which wait of the attempt (a later question restarts the clock).
        asked: u64,
    },
    /// A client answers a task waiting for input.
    ProvideInput {
        /// The task.
        task_id: String,
        /// The answer.
        text: String,
        /// `None` for an unknown task; the record after the answer, or why it was not taken.
        reply: RpcReplyPort<Option<Result<TaskRecord, InputRefusal>>>,
    },
    /// Cancel a task (`tasks/cancel`): the running one ends `canceled`, a queued one is dropped.
    Cancel {
        /// Task id.
        id: String,
        /// Answer: the record after the cancel, or `None` for an unknown id.
        reply: RpcReplyPort<Option<TaskRecord>>,
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
    /// Select a driver choice by name (applies from the next inference call).
    Switch {
        /// Choice name.
        choice: serde_json::Value,
        /// Who asks.
        principal: Principal,
        /// Answer.
        reply: RpcReplyPort<Result<SettingChange, ControlError>>,
    },
    /// Change `inference.max_tokens` for every later call.
    SetMaxTokens {
        /// The value (an integer 1..2^32−1).
        value: serde_json::Value,
        /// Who asks.
        principal: Principal,
        /// Answer.
        reply: RpcReplyPort<Result<SettingChange, ControlError>>,
    },
    /// The `GET /control` body.
    ControlView(RpcReplyPort<serde_json::Value>),
    /// Continue the task a resumed session was running and the tasks queued behind it;
    /// answered when they all ended (empty when there were none).
    Resume(RpcReplyPort<Vec<TaskOutcome>>),
    /// Test hook: panic inside the handler, as a host bug would (the loop is restarted and
    /// rebuilds its context from the conversation record).
    InjectPanic,
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
    /// Turns per task.
    pub max_turns: u32,
    /// `inference.max_retries`: resends of a call a provider answered 429 or 5xx.
    pub max_retries: u32,
    /// System prompt.
    pub system: String,
    /// Tools offered to the model.
    pub tools: Vec<ToolSpec>,
    /// Where `result.txt` goes.
    pub out_dir: PathBuf,
    /// Driver choices, primary first.
    pub choices: std::sync::Arc<[crate::choices::DriverChoice]>,
    /// Which choice is in use: decided by the credentials actor, read here per call.
    pub choice_in_use: crate::credentials::ChoiceInUse,
    /// A controller's `inference.max_tokens`: owned by the loop, kept across its restarts.
    pub cap: MaxTokensCap,
    /// Whether alternates are declared: then `produced_by`, `driver_choice` are written.
    pub stamp_producers: bool,
    /// `control.settings` (empty: no operator surface).
    pub control_settings: Vec<String>,
    /// The control token's id, for the trace.
    pub token_id: Option<String>,
    /// `control.agent_settings` lists `inference.driver`: the `switch-driver` tool exists.
    pub agent_switch: bool,
    /// The conversation record: a (re)started loop rebuilds its context from it.
    pub conversation_path: Option<PathBuf>,
    /// In a cluster the record is a JetStream subject instead: `(JetStream, session id)`.
    pub cluster_conversation: Option<(async_nats::jetstream::Context, String)>,
    /// The task a resumed session continues.
    pub resume: Option<ResumeSeed>,
    /// Upper bound on one driver call as seen by the loop (the driver's deadline plus margin).
    pub call_timeout: std::time::Duration,
    /// `lifecycle.task_acceptance`.
    pub acceptance: TaskAcceptance,
    /// `lifecycle.queue_depth`.
    pub queue_depth: usize,
    /// `lifecycle.input_timeout_secs`.
    pub input_timeout: Option<std::time::Duration>,
    /// The hooks, in declaration order.
    pub hooks: Vec<HookRoute>,
    /// `inference.max_task_reopens`.
    pub max_task_reopens: u32,
    /// `inference.compaction` and `context.max_tokens`.
    pub compaction: CompactionConfig,
    /// Whether `on-session-start` has fired (kept across restarts of the loop).
    pub session_hooks: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// When the session started.
    pub started: std::time::Instant,
    /// Span export (`observability.otel_endpoint`).
    pub telemetry: Option<crate::otel::Telemetry>,
}

/// A controller's `inference.max_tokens` (0: none set; the choice's own cap applies). The loop
/// owns it; it lives in the loop's arguments so a restarted loop keeps it.
#[derive(Debug, Clone, Default)]
pub struct MaxTokensCap(std::sync::Arc<std::sync::atomic::AtomicU32>);

impl MaxTokensCap {
    /// The cap a controller set, if any.
    pub fn get(&self) -> Option<u32> {
        Some(self.0.load(std::sync::atomic::Ordering::Acquire)).filter(|v| *v > 0)
    }

    pub(crate) fn set(&self, v: u32) {
        self.0.store(v, std::sync::atomic::Ordering::Release);
    }
}

/// A held continuation (CONTRACT §3): the next call sends only the messages after `acked`,
/// plus `id`.
#[derive(Debug, Clone)]
pub struct HeldContinuation {
    pub(crate) id: String,
    pub(crate) acked: usize,
    /// The choice it came from: a call under another choice resends everything.
    pub(crate) choice: usize,
}

/// A submitted task waiting behind the running one.
pub struct Queued {
    pub(crate) record: TaskRecord,
    pub(crate) text: String,
    pub(crate) reply: Option<RpcReplyPort<TaskOutcome>>,
    pub(crate) traceparent: Option<String>,
}

/// The loop's state: the context (the conversation with its JSON and token counts), the running
/// task and the queue, task records and the held continuation.
pub struct LoopState {
    pub(crate) config: LoopConfig,
    pub(crate) conversation: context::Context,
    pub(crate) running: Option<Running>,
    pub(crate) attempts: u64,
    pub(crate) queue: std::collections::VecDeque<Queued>,
    /// The continuation id a driver handed back, and how many messages it acknowledges.
    pub(crate) continuation: Option<HeldContinuation>,
    /// The (choice, cap) of the last call, to trace `control_applied` when a change takes effect.
    pub(crate) last_applied: Option<(usize, u32)>,
    pub(crate) tasks: std::collections::HashMap<String, TaskRecord>,
    /// Questions asked so far (`request-input`): a timer fires only for the question it was
    /// started for.
    pub(crate) asked: u64,
    /// What `on-session-end` reports.
    pub(crate) totals: hooks::Totals,
    /// A step journaled without waiting (a turn's last tool result), until it is settled.
    pub(crate) unacked: Option<unacked::Unacked>,
    /// The session's peers the loop tells on every turn, named once (see [`LoopState::peer`]).
    pub(crate) peers: Vec<crate::peer::Peer>,
}

/// The agent loop actor.
pub struct AgentLoop;

impl Actor for AgentLoop {
    type Msg = LoopMsg;
    type State = LoopState;
    type Arguments = LoopConfig;

    async fn pre_start(&self, _myself: ActorRef<LoopMsg>, config: LoopConfig) -> Result<LoopState, ActorProcessingErr> {
        let restored = match (&config.cluster_conversation, config.conversation_path.as_deref()) {
            (Some((js, session)), _) => {
                let record = crate::cluster::Record::Conversation;
                let (_, entries) = crate::cluster::StreamLog::open(js, session, record).await?;
                resume::context_of(entries)
            }
            (None, Some(path)) => read_conversation(path),
            (None, None) => Vec::new(),
        };
        let mut state = LoopState {
            config,
            conversation: Default::default(),
            running: None,
            attempts: 0,
            queue: Default::default(),
            tasks: Default::default(),
            continuation: None,
            last_applied: None,
            asked: 0,
            totals: Default::default(),
            unacked: None,
            peers: Vec::new(),
        };
        state.peers = peers::named(state.sid());
        state.restore(restored);
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<LoopMsg>,
        msg: LoopMsg,
        state: &mut LoopState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            LoopMsg::Submit { request, accepted, reply } => {
                state.submit(&myself, request, accepted, reply).await;
            }
            LoopMsg::GetTask { id, reply } => {
                let _ = reply.send(state.tasks.get(&id).cloned());
            }
            LoopMsg::InputRequired { attempt, prompt, answer } => {
                state.on_input_required(&myself, attempt, prompt, answer).await;
            }
            LoopMsg::InputTimedOut { attempt, asked } => {
                state.on_input_timeout(attempt, asked).await;
                state.start_queued(&myself).await;
            }
            LoopMsg::ProvideInput { task_id, text, reply } => {
                let r = state.provide_input(&task_id, text).await;
                let _ = reply.send(r);
            }
            LoopMsg::Waiting(reply) => {
                let waiting = state.running.as_ref().filter(|r| r.waiting.is_some()).map(|r| r.task_id.clone());
                let _ = reply.send(waiting);
            }
            LoopMsg::ListTasks(reply) => {
                let mut all: Vec<TaskRecord> = state.tasks.values().cloned().collect();
                all.sort_by(|a, b| b.id.cmp(&a.id));
                let _ = reply.send(all);
            }
            LoopMsg::Cancel { id, reply } => {
                let r = state.cancel(&myself, &id).await;
                let _ = reply.send(r);
            }
            LoopMsg::InferenceDone { attempt, reply } => {
                if state.running.as_ref().is_some_and(|r| r.attempt == attempt) {
                    state.on_inference(&myself, *reply).await;
                    state.start_queued(&myself).await;
                }
            }
            LoopMsg::ToolDone { attempt, reply } => {
                if state.running.as_ref().is_some_and(|r| r.attempt == attempt) {
                    state.on_tool_done(&myself, reply).await;
                    state.start_queued(&myself).await;
                }
            }
            LoopMsg::Switch { choice, principal, reply } => {
                let r = state.switch(&choice, principal).await;
                let _ = reply.send(r);
            }
            LoopMsg::SetMaxTokens { value, principal, reply } => {
                let r = state.set_max_tokens(&value, principal);
                let _ = reply.send(r);
            }
            LoopMsg::ControlView(reply) => {
                let v = state.control_view().await;
                let _ = reply.send(v);
            }
            LoopMsg::Resume(reply) => match state.config.resume.clone() {
                Some(seed) if state.running.is_none() => state.resume_task(&myself, &seed, reply).await,
                _ => {
                    let _ = reply.send(Vec::new());
                }
            },
            LoopMsg::InjectPanic => panic!("agent loop: injected panic (test hook)"),
            LoopMsg::EndSession(reply) => {
                state.end_session().await;
                let _ = reply.send(());
            }
        }
        Ok(())
    }
}
