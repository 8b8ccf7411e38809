//! Lifecycle hooks (`murmur:hook/lifecycle@0.5.0`): one live instance per hook for the
//! session, so a hook keeps its own state from one event to the next.
//!
//! Each call is bounded like a tool call: the epoch callback and an outer timer stop the guest
//! once it has used its deadline of its own time (time waiting on `run-inference` is not its
//! own). An instance that failed a call (trap, deadline, limit) is never called again: the
//! caller drops it and instantiates a fresh one for the next event.

use std::sync::Arc;
use std::time::Duration;

use crate::bindings::hook::Hook;
use crate::bindings::hook::exports::murmur::hook::lifecycle as wit;
use crate::call::{arm_deadline, new_store, within_own_time};
use crate::classify::stderr_text;
use crate::engine::Host;
use crate::error::CallError;
use crate::events::GuestEvents;
use crate::grants::Grants;
use crate::load::{LoadedArtifact, Pre};
use crate::state::StoreState;
use wasmtime::Store;

/// One lifecycle event, in the runtime's own types.
#[derive(Debug, Clone, PartialEq)]
pub enum HookEvent {
    /// `on-session-start`.
    SessionStart {
        /// Capsule name.
        capsule_name: String,
        /// Capsule version.
        capsule_version: String,
        /// Session id.
        session_id: String,
        /// The primary model.
        model: String,
        /// The capsule's tools (the names the model is offered).
        capabilities: Vec<String>,
    },
    /// `on-task-start`.
    TaskStart {
        /// Task id.
        task_id: String,
        /// Context id.
        context_id: String,
        /// `door`, `launch` or `resume`.
        source: String,
        /// Bytes of the task's text.
        input_bytes: u64,
    },
    /// `on-inference`, after each answered driver call.
    Inference {
        /// Turn number.
        turn: u32,
        /// Input tokens (the provider's count, else the estimate).
        input_tokens: u64,
        /// Output tokens.
        output_tokens: u64,
        /// `tool_call`, `final` or `error`.
        decision: String,
        /// The first tool asked for.
        tool_name: Option<String>,
        /// The reply's text.
        output: Option<String>,
    },
    /// `on-tool-call`, after each tool call.
    ToolCall {
        /// Turn number.
        turn: u32,
        /// Tool name.
        tool_name: String,
        /// Input bytes.
        input_bytes: u64,
        /// Output bytes.
        output_bytes: u64,
        /// Wall time.
        duration_ms: u64,
        /// `passed` or `failed`.
        status: String,
    },
    /// `on-compaction`, when occupancy reaches the threshold.
    Compaction {
        /// The whole history as `(role, content)`.
        messages: Vec<(String, String)>,
        /// Occupancy in tokens.
        session_tokens: u64,
        /// Occupancy over the window.
        threshold: f64,
        /// `inference.compaction.model`.
        model: Option<String>,
        /// `inference.compaction.system_prompt`.
        system_prompt: Option<String>,
    },
    /// `on-task-end`.
    TaskEnd {
        /// Task id.
        task_id: String,
        /// The exit status.
        exit_status: String,
    },
    /// `on-session-end`.
    SessionEnd {
        /// Turns of every task.
        total_turns: u32,
        /// Input tokens of every call.
        total_input_tokens: u64,
        /// Output tokens of every call.
        total_output_tokens: u64,
        /// Tool calls.
        total_tool_calls: u32,
        /// Session wall time.
        duration_ms: u64,
        /// How the session ended.
        exit_status: String,
    },
}

impl HookEvent {
    /// The lifecycle function (and binding) name.
    pub fn binding(&self) -> &'static str {
        match self {
            HookEvent::SessionStart { .. } => "on-session-start",
            HookEvent::TaskStart { .. } => "on-task-start",
            HookEvent::Inference { .. } => "on-inference",
            HookEvent::ToolCall { .. } => "on-tool-call",
            HookEvent::Compaction { .. } => "on-compaction",
            HookEvent::TaskEnd { .. } => "on-task-end",
            HookEvent::SessionEnd { .. } => "on-session-end",
        }
    }
}

/// What a hook answered.
#[derive(Debug, Clone, PartialEq)]
pub enum HookOutput {
    /// Nothing.
    None,
    /// A new conversation as `(role, content)`.
    ReplaceContext(Vec<(String, String)>),
    /// Tool manifests (never honoured here): how many.
    WriteManifests(usize),
    /// A JSON object for the event stream.
    Artifact(String),
    /// Run the task again with this feedback.
    ReopenTask(String),
}

impl HookOutput {
    /// The arm's WIT name, `None` for `none`.
    pub fn arm(&self) -> Option<&'static str> {
        match self {
            HookOutput::None => None,
            HookOutput::ReplaceContext(_) => Some("replace-context"),
            HookOutput::WriteManifests(_) => Some("write-manifests"),
            HookOutput::Artifact(_) => Some("artifact"),
            HookOutput::ReopenTask(_) => Some("reopen-task"),
        }
    }

    fn bytes(&self) -> u64 {
        match self {
            HookOutput::ReplaceContext(m) => m.iter().map(|(r, c)| r.len() + c.len()).sum::<usize>() as u64,
            HookOutput::Artifact(s) | HookOutput::ReopenTask(s) => s.len() as u64,
            HookOutput::None | HookOutput::WriteManifests(_) => 0,
        }
    }
}

/// Why a hook call gave no output.
#[derive(Debug, thiserror::Error)]
pub enum HookError {
    /// The call itself failed (trap, deadline, limit): the instance is spent.
    #[error(transparent)]
    Call(CallError),
    /// The hook answered with an error string.
    #[error("hook `{artifact}` answered {binding} with an error: {message}")]
    Returned {
        /// Hook name.
        artifact: String,
        /// The lifecycle function.
        binding: &'static str,
        /// What it said.
        message: String,
    },
}

/// A live hook instance.
pub struct HookInstance {
    artifact: LoadedArtifact,
    store: Store<StoreState>,
    hook: Hook,
    deadline: Duration,
    output_bytes: u64,
}

impl std::fmt::Debug for HookInstance {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookInstance").field("artifact", &self.artifact.name).finish_non_exhaustive()
    }
}

impl LoadedArtifact {
    /// Instantiate this hook with `grants` (its deadline and output limit come from
    /// `grants.limits`); `events` serves its `run-inference`.
    pub async fn instantiate_hook(
        &self,
        host: &Host,
        grants: &Grants,
        events: Arc<dyn GuestEvents>,
    ) -> Result<HookInstance, CallError> {
        let Pre::Hook(pre) = self.pre().await? else {
            return Err(CallError::Instantiate {
                artifact: self.name.clone(),
                source: "a driver or tool has no lifecycle export".into(),
            });
        };
        let mut store = new_store(host, grants, events, &self.name, false)?;
        let deadline = Duration::from_secs(grants.limits.deadline_seconds);
        let hook = match pre.instantiate_async(&mut store).await {
            Ok(h) => h,
            Err(e) => return Err(self.classify(e, &store, deadline, true)),
        };
        Ok(HookInstance { artifact: self.clone(), store, hook, deadline, output_bytes: grants.limits.output_bytes })
    }
}

fn message(m: &(String, String)) -> wit::Message {
    wit::Message { role: m.0.clone(), content: m.1.clone() }
}

impl HookInstance {
    /// Call the lifecycle function of `event`.
    pub async fn call(&mut self, event: &HookEvent) -> Result<HookOutput, HookError> {
        let own = arm_deadline(&mut self.store, self.deadline);
        let l = self.hook.murmur_hook_lifecycle();
        let store = &mut self.store;
        let run = async {
            match event {
                HookEvent::SessionStart { capsule_name, capsule_version, session_id, model, capabilities } => {
                    let ctx = wit::SessionContext {
                        capsule_name: capsule_name.clone(),
                        capsule_version: capsule_version.clone(),
                        session_id: session_id.clone(),
                        model: model.clone(),
                        capabilities: capabilities.clone(),
                    };
                    l.call_on_session_start(store, &ctx).await
                }
                HookEvent::TaskStart { task_id, context_id, source, input_bytes } => {
                    let e = wit::TaskStartEvent {
                        task_id: task_id.clone(),
                        context_id: context_id.clone(),
                        source: source.clone(),
                        input_bytes: *input_bytes,
                    };
                    l.call_on_task_start(store, &e).await
                }
                HookEvent::Inference { turn, input_tokens, output_tokens, decision, tool_name, output } => {
                    let e = wit::InferenceEvent {
                        turn: *turn,
                        input_tokens: *input_tokens,
                        output_tokens: *output_tokens,
                        decision: decision.clone(),
                        tool_name: tool_name.clone(),
                        prompt: None,
                        output: output.clone(),
                        tools: None,
                    };
                    l.call_on_inference(store, &e).await
                }
                HookEvent::ToolCall { turn, tool_name, input_bytes, output_bytes, duration_ms, status } => {
                    let e = wit::ToolEvent {
                        turn: *turn,
                        tool_name: tool_name.clone(),
                        input_bytes: *input_bytes,
                        output_bytes: *output_bytes,
                        duration_ms: *duration_ms,
                        status: status.clone(),
                    };
                    l.call_on_tool_call(store, &e).await
                }
                HookEvent::Compaction { messages, session_tokens, threshold, model, system_prompt } => {
                    let e = wit::CompactionEvent {
                        messages: messages.iter().map(message).collect(),
                        session_tokens: *session_tokens,
                        threshold: *threshold,
                        model: model.clone(),
                        system_prompt: system_prompt.clone(),
                    };
                    l.call_on_compaction(store, &e).await
                }
                HookEvent::TaskEnd { task_id, exit_status } => {
                    let e = wit::TaskEndEvent { task_id: task_id.clone(), exit_status: exit_status.clone() };
                    l.call_on_task_end(store, &e).await
                }
                HookEvent::SessionEnd {
                    total_turns,
                    total_input_tokens,
                    total_output_tokens,
                    total_tool_calls,
                    duration_ms,
                    exit_status,
                } => {
                    let e = wit::SessionEndEvent {
                        total_turns: *total_turns,
                        total_input_tokens: *total_input_tokens,
                        total_output_tokens: *total_output_tokens,
                        total_tool_calls: *total_tool_calls,
                        total_shell_calls: 0,
                        duration_ms: *duration_ms,
                        exit_status: exit_status.clone(),
                    };
                    l.call_on_session_end(store, &e).await
                }
            }
        };
        let a = &self.artifact;
        let answered = match within_own_time(run, self.deadline, &own).await {
            Err(()) => {
                return Err(HookError::Call(CallError::Deadline {
                    artifact: a.name.clone(),
                    seconds: self.deadline.as_secs_f64(),
                }));
            }
            Ok(Err(e)) => return Err(HookError::Call(a.classify(e, &self.store, self.deadline, false))),
            Ok(Ok(r)) => r,
        };
        let output = match answered {
            Err(message) => {
                return Err(HookError::Returned { artifact: a.name.clone(), binding: event.binding(), message });
            }
            Ok(wit::HookOutput::None) => HookOutput::None,
            Ok(wit::HookOutput::ReplaceContext(m)) => {
                HookOutput::ReplaceContext(m.into_iter().map(|m| (m.role, m.content)).collect())
            }
            Ok(wit::HookOutput::WriteManifests(m)) => HookOutput::WriteManifests(m.len()),
            Ok(wit::HookOutput::Artifact(s)) => HookOutput::Artifact(s),
            Ok(wit::HookOutput::ReopenTask(s)) => HookOutput::ReopenTask(s),
        };
        if output.bytes() > self.output_bytes {
            return Err(HookError::Call(CallError::HostLimit {
                artifact: a.name.clone(),
                what: "the size of its result",
                limit: self.output_bytes,
                key: "output_bytes",
            }));
        }
        Ok(output)
    }

    /// What the hook wrote to stderr so far.
    pub fn stderr(&self) -> String {
        stderr_text(&self.store)
    }
}
