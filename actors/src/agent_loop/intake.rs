//! Accepting, queueing, rejecting and canceling tasks (`lifecycle.task_acceptance`,
//! `lifecycle.queue_depth`, `tasks/cancel`). Every task gets a record that `tasks/get` answers
//! from, including rejected and canceled ones.

use capsule_protocol::frame::{Frame, StatusBody, TaskState};
use capsule_protocol::manifest::TaskAcceptance;
use capsule_protocol::trace::{ExitStatus, TraceKind};
use ractor::{ActorRef, RpcReplyPort};
use serde_json::json;

use super::TaskOutcome;
use super::{Accepted, LoopMsg, LoopState, Origin, Queued, TaskRecord};
use crate::error::JournalError;

pub(crate) fn new_id(prefix: &str) -> String {
    format!("{prefix}_{}", uuid::Uuid::now_v7())
}

impl LoopState {
    fn final_frame(&self, r: &TaskRecord) {
        self.emit(Frame::Status {
            id: r.id.clone(),
            context_id: r.context_id.clone(),
            status: StatusBody { state: r.state, message: r.message.clone(), response: r.response.clone() },
            is_final: r.state.is_final(),
        });
    }

    pub(crate) async fn submit(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        request: super::TaskRequest,
        accepted: Option<Accepted>,
        reply: Option<RpcReplyPort<TaskOutcome>>,
    ) {
        let super::TaskRequest { text, context_id, origin, traceparent } = request;
        let mut record = TaskRecord {
            id: new_id("tsk"),
            context_id: context_id.unwrap_or_else(|| new_id("ctx")),
            state: TaskState::Working,
            message: "accepted".into(),
            response: None,
        };
        let refusal = if origin == Origin::Door && self.config.acceptance == TaskAcceptance::None {
            Some("this capsule takes no tasks over its door (lifecycle.task_acceptance: none)".to_string())
        } else if self.running.is_some() {
            match self.config.acceptance {
                TaskAcceptance::Queue if self.queue.len() < self.config.queue_depth => None,
                TaskAcceptance::Queue => Some(format!("the capsule is busy and its queue is full ({} waiting, lifecycle.queue_depth); submit again later", self.queue.len())),
                _ => Some("the capsule is busy with another task (lifecycle.task_acceptance: single); submit again when it ends".to_string()),
            }
        } else {
            None
        };
        if let Some(why) = refusal {
            return self.reject(record, why, accepted, reply);
        }
        if self.running.is_some() {
            let position = self.queue.len() + 1;
            record.message = format!("queued behind the running task (position {position})");
            // Journal first: a queued task is accepted too, so a kill while it waits must not
            // lose it (a resumed session runs it).
            let queued =
                json!({"task_id": record.id, "context_id": record.context_id, "text": text, "position": position});
            if let Err(e) = self.journal(Vec::new(), vec![self.event(TraceKind::TaskQueued, queued)]).await {
                return self.refuse_unjournaled(record, accepted, reply, e);
            }
            self.tasks.insert(record.id.clone(), record.clone());
            self.final_frame(&record);
            if let Some(a) = accepted {
                let _ = a.send(record.clone());
            }
            self.queue.push_back(Queued { record, text, reply, traceparent });
            return;
        }
        self.tasks.insert(record.id.clone(), record.clone());
        // Journal first: the client hears "accepted" only once `task_start` and the user
        // message are written, so a kill right after acceptance is resumed, never lost.
        let id = record.id.clone();
        self.start_task(myself, record.clone(), text, reply, traceparent).await;
        if let Some(a) = accepted {
            // The record now: `failed` when its start could not be journaled.
            let _ = a.send(self.tasks.get(&id).cloned().unwrap_or(record));
        }
    }

    /// Answer a task that is not taken: its record says why, it gets a final frame, and a
    /// waiting submitter hears the same.
    fn reject(
        &mut self,
        mut record: TaskRecord,
        why: String,
        accepted: Option<Accepted>,
        reply: Option<RpcReplyPort<TaskOutcome>>,
    ) {
        record.state = TaskState::Rejected;
        record.message = why.clone();
        self.tasks.insert(record.id.clone(), record.clone());
        self.final_frame(&record);
        if let Some(a) = accepted {
            let _ = a.send(record.clone());
        }
        if let Some(r) = reply {
            let _ = r.send(TaskOutcome {
                task_id: record.id,
                context_id: record.context_id,
                exit_status: ExitStatus::Failed,
                message: why,
                result_path: Default::default(),
            });
        }
    }

    /// A task whose queueing could not be journaled is not taken: it would be lost with the
    /// process.
    fn refuse_unjournaled(
        &mut self,
        record: TaskRecord,
        accepted: Option<Accepted>,
        reply: Option<RpcReplyPort<TaskOutcome>>,
        e: JournalError,
    ) {
        tracing::error!(error = %e, task = record.id, "a queued task could not be journaled");
        self.reject(record, e.to_string(), accepted, reply);
    }

    /// Start the next queued task, if any (after one ended).
    pub(crate) async fn start_queued(&mut self, myself: &ActorRef<LoopMsg>) {
        if self.running.is_none()
            && let Some(q) = self.queue.pop_front()
        {
            self.start_task(myself, q.record, q.text, q.reply, q.traceparent).await;
        }
    }

    pub(crate) async fn cancel(&mut self, myself: &ActorRef<LoopMsg>, id: &str) -> Option<TaskRecord> {
        if self.running.as_ref().is_some_and(|r| r.task_id == id) {
            self.finish(ExitStatus::Canceled, "canceled by a client".into()).await;
            self.start_queued(myself).await;
        } else if let Some(pos) = self.queue.iter().position(|q| q.record.id == id) {
            // Journaled first, so a resumed session does not run a task its client canceled; a
            // cancel that cannot be journaled is not applied (the task stays queued).
            let message = "canceled by a client before it started";
            let ended = json!({"task_id": id, "exit_status": ExitStatus::Canceled.as_str(), "turns": 0, "duration_ms": 0, "message": message});
            if let Err(e) = self.journal(Vec::new(), vec![self.event(TraceKind::TaskEnd, ended)]).await {
                tracing::error!(error = %e, task = id, "the cancel of a queued task could not be journaled; it stays queued");
                return self.tasks.get(id).cloned();
            }
            let Some(mut q) = self.queue.remove(pos) else { return self.tasks.get(id).cloned() };
            q.record.state = TaskState::Canceled;
            q.record.message = message.into();
            self.tasks.insert(q.record.id.clone(), q.record.clone());
            self.final_frame(&q.record);
            if let Some(r) = q.reply.take() {
                let rec = q.record;
                let _ = r.send(TaskOutcome {
                    task_id: rec.id,
                    context_id: rec.context_id,
                    exit_status: ExitStatus::Canceled,
                    message: rec.message,
                    result_path: Default::default(),
                });
            }
        }
        self.tasks.get(id).cloned()
    }
}
