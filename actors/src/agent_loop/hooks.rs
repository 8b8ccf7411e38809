//! Firing lifecycle hooks from the loop, and what their outputs may change.
//!
//! Each event goes to every hook whose binding takes it, in declaration order. A blocking hook
//! is asked and the loop waits for it (its deadline bounds the wait); an async hook is told,
//! through its bounded queue, and its output is ignored. What comes back is honoured only when
//! the event honours that arm (`artifact` at `on-inference`, `replace-context` at
//! `on-compaction`, `reopen-task` at `on-task-end`) and, for the last two, the hook's
//! `commit_policy` names it; anything else is discarded and traced `hook_dispatch_error`
//! (`E-RUN-093`). A failed call was traced by the hook actor (`hook_error`) and changes nothing.

use capsule_protocol::Code;
use capsule_protocol::manifest::{HookContract, honoured_arm};
use capsule_protocol::trace::TraceKind;
use capsule_runtime::{HookError, HookEvent, HookOutput};
use serde_json::json;
use std::time::Duration;

use super::LoopState;
use crate::hook::{HookMsg, HookQueue};
use crate::peer::Peer;

/// How long the loop waits for the async hooks' queues at the end of a session.
pub const DRAIN_WAIT: Duration = Duration::from_secs(15);

/// One hook as the loop reaches it.
#[derive(Debug, Clone)]
pub struct HookRoute {
    /// The hook artifact's name.
    pub name: String,
    /// Its binding, mode and commit policy.
    pub contract: HookContract,
    /// Its queue, when async.
    pub queue: HookQueue,
}

/// What one event's hooks gave back that the loop acts on.
#[derive(Debug, Default)]
pub struct Fired {
    /// Honoured outputs: `(hook, output)`.
    pub honoured: Vec<(String, HookOutput)>,
    /// The first blocking hook that failed: `(hook, what went wrong)`.
    pub failed: Option<(String, String)>,
}

impl LoopState {
    /// Whether any hook takes `binding`.
    pub(crate) fn hooked(&self, binding: &str) -> bool {
        self.config.hooks.iter().any(|h| h.contract.runs_at(binding))
    }

    /// Fire `event` at every hook bound to it.
    pub(crate) async fn fire(&mut self, event: HookEvent) -> Fired {
        let binding = event.binding();
        let mut fired = Fired::default();
        let routes: Vec<HookRoute> =
            self.config.hooks.iter().filter(|h| h.contract.runs_at(binding)).cloned().collect();
        for h in routes {
            let peer = Peer::hook(self.sid(), &h.name);
            if !h.contract.blocking {
                if !h.queue.enter() {
                    self.dispatch_error(&h.name, binding, "queue-overflow");
                    continue;
                }
                if let Err(e) = peer.tell(HookMsg::Fire { event: Box::new(event.clone()), reply: None }) {
                    tracing::warn!(session = self.sid(), hook = h.name, error = %e, "an async hook event was not delivered");
                }
                continue;
            }
            let ask = |reply| HookMsg::Fire { event: Box::new(event.clone()), reply: Some(reply) };
            let answer = match peer.ask(ask, crate::peer::wait::UNTIL_DONE).await {
                Ok(a) => a.result,
                Err(e) => {
                    fired.failed.get_or_insert((h.name.clone(), e.to_string()));
                    continue;
                }
            };
            let output = match answer {
                Ok(o) => o,
                Err(e) => {
                    let why = match &e {
                        HookError::Call(c) => c.to_string(),
                        HookError::Returned { .. } => e.to_string(),
                    };
                    fired.failed.get_or_insert((h.name.clone(), why));
                    continue;
                }
            };
            let Some(arm) = output.arm() else { continue };
            let policy_allows = arm == "artifact" || h.contract.commit_policy == arm;
            if honoured_arm(binding) == Some(arm) && policy_allows {
                fired.honoured.push((h.name.clone(), output));
            } else {
                self.dispatch_error(&h.name, binding, arm);
            }
        }
        fired
    }

    fn dispatch_error(&self, hook: &str, event: &str, arm: &str) {
        let why = match arm {
            "queue-overflow" => {
                format!("async hook `{hook}` had {} events waiting; this one was dropped", crate::hook::ASYNC_QUEUE)
            }
            _ => format!(
                "hook `{hook}` returned `{arm}` from `{event}`, which does not honour it (or its commit_policy does not name it); the output was discarded"
            ),
        };
        self.trace(
            TraceKind::HookDispatchError,
            json!({"hook": hook, "event": event, "arm": arm, "code": Code::HookArmRefused.as_str(), "message": why}),
        );
    }

    /// `on-session-start`, once per session (a restarted loop does not fire it again).
    pub(crate) async fn session_started(&mut self) {
        if self.config.hooks.is_empty() || self.config.session_hooks.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return;
        }
        let c = &self.config;
        let event = HookEvent::SessionStart {
            capsule_name: c.capsule_name.clone(),
            capsule_version: c.capsule_version.clone(),
            session_id: c.session_id.clone(),
            model: c.choices.first().map(|ch| ch.model.clone()).unwrap_or_default(),
            capabilities: c.tools.iter().map(|t| t.name.clone()).collect(),
        };
        self.fire(event).await;
    }

    /// `on-session-end`, then wait (bounded) for every async hook's queue to run out.
    pub(crate) async fn session_ended(&mut self, exit_status: &str) {
        if self.config.hooks.is_empty() {
            return;
        }
        self.session_started().await;
        let t = self.totals;
        let event = HookEvent::SessionEnd {
            total_turns: t.turns,
            total_input_tokens: t.input_tokens,
            total_output_tokens: t.output_tokens,
            total_tool_calls: t.tool_calls,
            duration_ms: self.config.started.elapsed().as_millis() as u64,
            exit_status: exit_status.to_string(),
        };
        self.fire(event).await;
        let deadline = tokio::time::Instant::now() + DRAIN_WAIT;
        for h in self.config.hooks.iter().filter(|h| !h.contract.blocking) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            let drained = Peer::hook(self.sid(), &h.name).ask(HookMsg::Drain, left).await;
            if let Err(e) = drained {
                self.trace(
                    TraceKind::HookError,
                    json!({"hook": h.name, "event": "drain", "code": Code::HookFailed.as_str(), "message": format!("its queued events did not all run before the session ended: {e}")}),
                );
            }
        }
    }
}

/// What the loop counts for `on-session-end`.
#[derive(Debug, Clone, Copy, Default)]
pub struct Totals {
    /// Turns of every task.
    pub turns: u32,
    /// Input tokens of every call.
    pub input_tokens: u64,
    /// Output tokens of every call.
    pub output_tokens: u64,
    /// Tool calls.
    pub tool_calls: u32,
}

impl LoopState {
    /// `on-task-start` (after `on-session-start` the first time).
    pub(crate) async fn task_started(&mut self, task_id: &str, context_id: &str, input_bytes: u64) {
        if self.config.hooks.is_empty() {
            return;
        }
        self.session_started().await;
        let event = HookEvent::TaskStart {
            task_id: task_id.to_string(),
            context_id: context_id.to_string(),
            source: "task".into(),
            input_bytes,
        };
        self.fire(event).await;
    }

    /// `on-inference` after an answered call; an honoured `artifact` becomes an `artifact`
    /// frame named after the hook.
    pub(crate) async fn inference_answered(
        &mut self,
        input_tokens: u64,
        output_tokens: u64,
        text: &str,
        calls: &[super::call::TurnCall],
    ) {
        self.totals.input_tokens += input_tokens;
        self.totals.output_tokens += output_tokens;
        if !self.hooked("on-inference") {
            return;
        }
        let Some((task_id, turn)) = self.running.as_ref().map(|r| (r.task_id.clone(), r.turn)) else { return };
        let event = HookEvent::Inference {
            turn,
            input_tokens,
            output_tokens,
            decision: if calls.is_empty() { "final".into() } else { "tool_call".into() },
            tool_name: calls.first().map(|c| c.1.clone()),
            output: Some(text.to_string()),
        };
        for (hook, output) in self.fire(event).await.honoured {
            if let HookOutput::Artifact(payload) = output {
                self.emit(capsule_protocol::frame::Frame::Artifact {
                    id: task_id.clone(),
                    artifact: capsule_protocol::frame::ArtifactBody {
                        tool_name: Some(hook),
                        content: Some(payload),
                        fence_source: None,
                        tool_call_id: None,
                        is_error: None,
                        duration_ms: None,
                        exit_code: None,
                        truncated: None,
                        output_file: None,
                    },
                });
            }
        }
    }

    /// `on-tool-call` after a tool call's result is recorded.
    pub(crate) async fn tool_answered(&mut self, name: &str, input_bytes: u64, reply: &crate::tools::ToolRunReply) {
        self.totals.tool_calls += 1;
        if !self.hooked("on-tool-call") {
            return;
        }
        let turn = self.running.as_ref().map(|r| r.turn).unwrap_or(0);
        let event = HookEvent::ToolCall {
            turn,
            tool_name: name.to_string(),
            input_bytes,
            output_bytes: reply.content.len() as u64,
            duration_ms: reply.duration_ms,
            status: if reply.is_error { "failed".into() } else { "passed".into() },
        };
        self.fire(event).await;
    }

    /// `on-task-end`; the feedback of an honoured `reopen-task` when the task may go on (it
    /// ended ok, and it has reopens left), else `None`. A reopen beyond the budget is traced
    /// `task_reopened` with `refused: true`.
    pub(crate) async fn task_ending(&mut self, exit_status: &str) -> Option<(String, String)> {
        let r = self.running.as_mut()?;
        if self.config.hooks.is_empty() || r.task_end_fired {
            return None;
        }
        r.task_end_fired = true;
        let (task_id, reopens) = (r.task_id.clone(), r.reopens);
        let event = HookEvent::TaskEnd { task_id: task_id.clone(), exit_status: exit_status.to_string() };
        let fired = self.fire(event).await;
        let (hook, reason) = fired.honoured.into_iter().find_map(|(h, o)| match o {
            HookOutput::ReopenTask(reason) => Some((h, reason)),
            _ => None,
        })?;
        let max = self.config.max_task_reopens;
        let allowed = exit_status == "ok" && reopens < max;
        self.trace(
            TraceKind::TaskReopened,
            json!({"task_id": task_id, "hook": hook, "reason": reason, "reopens": reopens + u32::from(allowed), "max_task_reopens": max, "refused": !allowed, "exit_status": exit_status}),
        );
        if !allowed {
            return None;
        }
        if let Some(r) = self.running.as_mut() {
            r.reopens += 1;
            r.task_end_fired = false;
        }
        Some((hook, reason))
    }
}
