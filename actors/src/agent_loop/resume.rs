//! Resuming a session after the whole process stopped (`capsule run --resume`).
//!
//! The journal says where the interrupted task was: the conversation record holds every
//! message that entered the context, and the trace holds `tool_call_started` before each tool
//! ran. On resume, the loop rebuilds the conversation and continues the task:
//! - a tool call whose result is in the record is **not** run again;
//! - a call that was started but has no result is reported to the model as interrupted (it
//!   may or may not have taken effect), never silently re-run;
//! - a call that never started runs now;
//! - a provider call that was in flight is issued again;
//! - a final reply that was recorded but not finished is finished.
//!
//! Settings start from the manifest: the driver choice is `primary`, no secret is held.

use capsule_protocol::neutral::{Message, Role};
use capsule_protocol::trace::{ExitStatus, TraceKind};
use ractor::{ActorRef, RpcReplyPort};
use serde_json::json;
use std::collections::HashSet;
use std::time::Instant;

use super::TaskOutcome;
use super::{LoopMsg, LoopState, Running};

/// What a resumed session continues, read from its trace.
#[derive(Debug, Clone, Default)]
pub struct ResumeSeed {
    /// The interrupted task `(task_id, context_id)`, when one was running.
    pub task: Option<(String, String)>,
    /// Tasks that were queued behind it and neither started nor canceled, in order:
    /// `(task_id, context_id, text)`.
    pub queued: Vec<(String, String, String)>,
    /// Tool calls that were started and never finished.
    pub interrupted: HashSet<String>,
    /// The first frame id the resumed session may use: above every id that ever reached
    /// `frames.jsonl`, including lines dropped as torn or damaged, so no id is used twice.
    pub next_frame_id: u64,
}

/// Code of the result given to a tool call interrupted by a stop of the process.
pub const INTERRUPTED: &str = capsule_protocol::Code::ToolInterrupted.as_str();

/// The context a conversation record holds: its verified message lines from the last
/// compaction marker on (the whole record when the context was never compacted).
pub fn read_conversation(path: &std::path::Path) -> Vec<Message> {
    context_of(crate::emitter::journal_records(path))
}

/// The context the entries of a conversation record hold (from its last compaction marker on).
pub(crate) fn context_of(entries: Vec<Vec<u8>>) -> Vec<Message> {
    let mut context = Vec::new();
    for line in entries {
        let Ok(v) = serde_json::from_slice::<serde_json::Value>(&line) else { continue };
        if v.get(crate::journal::CONTEXT_REPLACED).is_some() {
            context.clear();
        } else if let Ok(m) = serde_json::from_value(v) {
            context.push(m);
        }
    }
    context
}

impl LoopState {
    /// Rebuild the context from the conversation record (a restarted or resumed loop).
    pub(crate) fn restore(&mut self, conversation: Vec<Message>) {
        self.conversation = super::context::Context::new(conversation);
    }

    /// Continue the interrupted task, if any, then the tasks that were queued behind it;
    /// `reply` is answered when all of them ended, with their outcomes in that order.
    pub(crate) async fn resume_task(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        seed: &ResumeSeed,
        reply: RpcReplyPort<Vec<TaskOutcome>>,
    ) {
        let mut waits = Vec::new();
        let mut port = || {
            let (tx, rx) = tokio::sync::oneshot::channel::<TaskOutcome>();
            waits.push(rx);
            RpcReplyPort::from(tx)
        };
        let interrupted = seed.task.clone().map(|t| (t, port()));
        for (id, context_id, text) in &seed.queued {
            let record = super::TaskRecord {
                id: id.clone(),
                context_id: context_id.clone(),
                state: capsule_protocol::frame::TaskState::Working,
                message: "queued (recovered by a resume)".into(),
                response: None,
            };
            self.tasks.insert(id.clone(), record.clone());
            self.queue.push_back(super::Queued { record, text: text.clone(), reply: Some(port()), traceparent: None });
        }
        tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for w in waits {
                if let Ok(o) = w.await {
                    outcomes.push(o);
                }
            }
            let _ = reply.send(outcomes);
        });
        let Some(((task_id, context_id), port)) = interrupted else {
            if !seed.queued.is_empty() {
                self.trace(TraceKind::SessionResumed, json!({"task_id": null, "queued": seed.queued.len()}));
            }
            return self.start_queued(myself).await;
        };
        self.attempts += 1;
        let start = self.conversation.iter().rposition(|m| m.role == Role::User).unwrap_or(0);
        let turns = self.conversation[start..].iter().filter(|m| m.role == Role::Assistant).count() as u32;
        let now = Instant::now();
        self.running = Some(Running {
            task_id: task_id.clone(),
            context_id: context_id.clone(),
            attempt: self.attempts,
            turn: turns,
            reply: Some(port),
            started: now,
            turn_started: now,
            calls: Vec::new(),
            next_call: 0,
            call_started: now,
            call_input_bytes: 0,
            started_journaled: false,
            estimate: 0,
            choice: 0,
            waiting: None,
            reopens: 0,
            task_end_fired: false,
            span: self.config.telemetry.as_ref().map(|t| t.task(&task_id, None)),
        });
        self.tasks.insert(
            task_id.clone(),
            super::TaskRecord {
                id: task_id.clone(),
                context_id,
                state: capsule_protocol::frame::TaskState::Working,
                message: "resumed".into(),
                response: None,
            },
        );
        self.trace(
            TraceKind::SessionResumed,
            json!({"task_id": task_id, "messages": self.conversation.len(), "turns": turns, "queued": seed.queued.len()}),
        );
        let last = self.conversation.last().cloned();
        match last {
            Some(m) if m.role == Role::Assistant => {
                let calls = super::call::tool_calls(&m.content);
                if calls.is_empty() {
                    let text = m.text();
                    return self.finish(ExitStatus::Ok, text).await;
                }
                self.continue_calls(myself, calls, &seed.interrupted).await;
            }
            Some(m) if m.role == Role::Tool => {
                // Results after the last assistant message: continue with the calls still open.
                let assistant = self.conversation.iter().rev().find(|m| m.role == Role::Assistant).cloned();
                let calls = assistant.map(|a| super::call::tool_calls(&a.content)).unwrap_or_default();
                self.continue_calls(myself, calls, &seed.interrupted).await;
            }
            _ => self.next_turn(myself).await,
        }
    }

    async fn continue_calls(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        calls: Vec<super::call::TurnCall>,
        interrupted: &HashSet<String>,
    ) {
        let answered: HashSet<String> =
            self.conversation.iter().filter(|m| m.role == Role::Tool).filter_map(|m| m.tool_call_id.clone()).collect();
        let mut next = 0;
        for (i, (id, name, _)) in calls.iter().map(|c| &**c).enumerate() {
            if answered.contains(id) {
                next = i + 1;
                continue;
            }
            if interrupted.contains(id) {
                let content = format!(
                    "{INTERRUPTED}: the runtime stopped while `{name}` was running; it may or may not have taken effect, so it was not run again. Check before repeating it."
                );
                let fields = json!({"tool_call_id": id, "tool_name": name, "is_error": true, "interrupted": true, "content": content});
                let result = Message::tool_result(id.clone(), content, true);
                if let Err(e) = self.record_with(result, vec![self.event(TraceKind::ToolCall, fields)]).await {
                    return self.fail_unjournaled(e).await;
                }
                next = i + 1;
                continue;
            }
            break;
        }
        if let Some(r) = self.running.as_mut() {
            r.calls = calls;
            r.next_call = next;
        }
        self.run_pending(myself).await;
    }
}
