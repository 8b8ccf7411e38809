//! The running task and the loop's steps: start, turn, inference answer, tool calls, finish.

use capsule_protocol::frame::{Frame, StatusBody, TaskState};
use capsule_protocol::neutral::{DriverRequest, Message, ProducedBy, Role, StopReason};
use capsule_protocol::trace::{ExitStatus, TraceEvent, TraceKind};
use ractor::{ActorRef, RpcReplyPort};
use serde_json::json;
use std::time::Instant;

use super::TaskOutcome;
use super::{LoopMsg, LoopState, TaskRecord};
use crate::coalescer::CoalescerMsg;
use crate::emitter::EmitterMsg;
use crate::error::InferenceError;
use crate::error::JournalError;
use crate::gateway::InferReply;
use crate::journal::JournalMsg;
use crate::names::role;
use crate::peer::{Peer, wait};
use capsule_protocol::Code;

/// The task being worked on.
pub struct Running {
    pub(crate) task_id: String,
    pub(crate) context_id: String,
    pub(crate) attempt: u64,
    pub(crate) turn: u32,
    pub(crate) reply: Option<RpcReplyPort<TaskOutcome>>,
    pub(crate) started: Instant,
    pub(crate) turn_started: Instant,
    /// Tool calls of the current turn: (id, name, input), and the next to run.
    pub(crate) calls: Vec<super::call::TurnCall>,
    pub(crate) next_call: usize,
    pub(crate) call_started: Instant,
    /// The running call's input, in bytes of its JSON text (for its span and hooks).
    pub(crate) call_input_bytes: usize,
    /// The next call's `tool_call_started` is already journaled (it went in the reply's append).
    pub(crate) started_journaled: bool,
    /// cl100k estimate of the current call's input.
    pub(crate) estimate: u64,
    /// The driver choice the current call uses.
    pub(crate) choice: usize,
    /// The running tool's `request-input`, while the task waits for a person.
    pub(crate) waiting: Option<tokio::sync::oneshot::Sender<String>>,
    /// Times an `on-task-end` hook sent this task back.
    pub(crate) reopens: u32,
    /// Whether `on-task-end` fired for the current attempt at an end.
    pub(crate) task_end_fired: bool,
    /// The task's span (`observability.otel_endpoint`).
    pub(crate) span: Option<opentelemetry::Context>,
}

impl LoopState {
    /// Send a frame to the emitter (which journals it to `frames.jsonl` and fans it out). An
    /// emitter that is restarting loses the frame; the trace and conversation still have it.
    pub(crate) fn emit(&self, frame: Frame) {
        // Held while a step is unacknowledged: no frame shows a step before the journal has it.
        let Some(frame) = self.hold_frame(frame) else { return };
        if let Err(e) = self.peer(role::EMITTER).tell(EmitterMsg::Emit(frame)) {
            tracing::warn!(session = self.sid(), error = %e, "a frame was not emitted");
        }
    }

    /// Add a message to the context once it is written to the conversation record, with
    /// `events` (trace lines that belong to the same step) written after it. When the write
    /// fails the message does not enter the context and the caller must not act on it.
    pub(crate) async fn record_with(&mut self, m: Message, events: Vec<TraceEvent>) -> Result<(), JournalError> {
        // Serialized once: the journal writes this text and the context keeps it.
        let json = serde_json::value::to_raw_value(&m).map_err(JournalError::Serialize)?;
        self.journal(vec![json.clone()], events).await?;
        self.conversation.push_serialized(m, json);
        Ok(())
    }

    async fn record(&mut self, m: Message) -> Result<(), JournalError> {
        self.record_with(m, Vec::new()).await
    }

    /// Write messages and trace events and wait until they are written.
    pub(crate) async fn journal(
        &mut self,
        messages: Vec<Box<serde_json::value::RawValue>>,
        events: Vec<TraceEvent>,
    ) -> Result<(), JournalError> {
        // A step never follows one that may not have been written.
        self.settle().await?;
        let wait = self.journal_wait();
        self.peer(role::JOURNAL).ask(|reply| JournalMsg::Append { events, messages, reply }, wait).await??;
        Ok(())
    }

    /// How long a step waits for its journal write. A clustered journal waits for JetStream as
    /// long as it takes (a leader election, a lost server): the step waits with it, and the
    /// lease keeper stops the session if its lease is lost meanwhile. A file journal answers at
    /// once or not at all.
    pub(crate) fn journal_wait(&self) -> std::time::Duration {
        if self.config.cluster_conversation.is_some() { wait::UNTIL_DONE } else { wait::JOURNAL }
    }

    /// Make the journal durable (end of a task or session); a failure is logged, the task's
    /// end is still reported.
    async fn flush(&self) {
        match self.peer(role::JOURNAL).ask(JournalMsg::Flush, wait::JOURNAL).await {
            Ok(0) => {}
            Ok(failed) => tracing::error!(session = self.sid(), failed, "journal writes failed in this session"),
            Err(e) => tracing::error!(session = self.sid(), error = %e, "the journal was not flushed"),
        }
    }

    /// End the running task because a step could not be journaled.
    pub(crate) async fn fail_unjournaled(&mut self, e: JournalError) {
        tracing::error!(session = self.sid(), error = %e, "a step could not be journaled");
        self.finish(ExitStatus::Failed, e.to_string()).await;
    }

    pub(crate) async fn start_task(
        &mut self,
        myself: &ActorRef<LoopMsg>,
        record: TaskRecord,
        text: String,
        reply: Option<RpcReplyPort<TaskOutcome>>,
        traceparent: Option<String>,
    ) {
        self.attempts += 1;
        let client = traceparent.as_deref().and_then(crate::otel::parse_traceparent);
        let span = self.config.telemetry.as_ref().map(|t| t.task(&record.id, client.as_ref()));
        let now = Instant::now();
        let running = Running {
            task_id: record.id,
            context_id: record.context_id,
            attempt: self.attempts,
            turn: 0,
            reply,
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
            span,
        };
        let _ = self.peer(role::COALESCER).tell(CoalescerMsg::Reset);
        let started = json!({"task_id": running.task_id, "context_id": running.context_id, "text": text});
        let (task_id, context_id, input_bytes) =
            (running.task_id.clone(), running.context_id.clone(), text.len() as u64);
        self.running = Some(running);
        // One awaited append: the user message and `task_start` are written before the task
        // acts (and before its submitter hears it was accepted).
        if let Err(e) =
            self.record_with(Message::user_text(text), vec![self.event(TraceKind::TaskStart, started)]).await
        {
            return self.fail_unjournaled(e).await;
        }
        self.task_started(&task_id, &context_id, input_bytes).await;
        self.next_turn(myself).await;
    }

    pub(crate) async fn next_turn(&mut self, myself: &ActorRef<LoopMsg>) {
        let max_turns = self.config.max_turns;
        let Some(r) = self.running.as_mut() else { return };
        if r.turn >= max_turns {
            let message = format!(
                "{}: the task used all {max_turns} turns (inference.max_turns) without a final reply; raise max_turns or simplify the task",
                Code::MaxTurns
            );
            return self.finish(ExitStatus::MaxTurnsReached, message).await;
        }
        // Compaction comes before the turn is counted: it never costs one.
        let window = {
            let c = &self.config;
            c.choices[c.choice_in_use.get().min(c.choices.len().saturating_sub(1))].context_window
        };
        if let Err(message) = self.compact_if_full(window).await {
            return self.finish(ExitStatus::Failed, message).await;
        }
        let Some(r) = self.running.as_mut() else { return };
        r.turn += 1;
        self.totals.turns += 1;
        r.turn_started = Instant::now();
        let (task_id, attempt, turn) = (r.task_id.clone(), r.attempt, r.turn);
        let context_id = r.context_id.clone();
        self.emit(Frame::Status {
            id: task_id.clone(),
            context_id: context_id.clone(),
            status: StatusBody { state: TaskState::Working, message: format!("inference turn {turn}"), response: None },
            is_final: false,
        });
        let c = &self.config;
        let active = c.choice_in_use.get().min(c.choices.len().saturating_sub(1));
        let choices = c.choices.clone();
        let choice = &choices[active];
        let max_tokens = c.cap.get().unwrap_or(choice.max_tokens);
        if !c.control_settings.is_empty() && self.last_applied.is_some_and(|l| l != (active, max_tokens)) {
            self.trace(
                TraceKind::ControlApplied,
                json!({"task_id": task_id, "turn": turn, "driver_choice": choice.name, "max_tokens": max_tokens}),
            );
        }
        self.last_applied = Some((active, max_tokens));
        let c = &self.config;
        let (from, continuation_id) = match &self.continuation {
            Some(h) if h.choice == active && h.acked <= self.conversation.len() => (h.acked, Some(h.id.clone())),
            _ => (0, None),
        };
        let producer = ProducedBy { driver: choice.driver.clone(), model: choice.model.clone() };
        // The request's fields, serialized again only when one of them changed; its messages
        // are spliced in from the context's cached JSON.
        let prompt_cache_key = format!("{}:{}:{}", c.capsule_name, c.capsule_version, context_id);
        let key = crate::wire::EnvelopeKey {
            model: &choice.model,
            max_tokens,
            continuation_id: continuation_id.as_deref(),
            prompt_cache_key: &prompt_cache_key,
        };
        let (system, tools) = (&c.system, &c.tools);
        let fields = || DriverRequest {
            model: choice.model.clone(),
            max_tokens,
            system: system.clone(),
            messages: Vec::new(),
            tools: tools.clone(),
            params: Default::default(),
            continuation_id: continuation_id.clone(),
            prompt_cache_key: prompt_cache_key.clone(),
        };
        let wire =
            self.conversation.fields(&key, fields).and_then(|()| self.conversation.wire_request(from, &producer));
        if let Some(r) = self.running.as_mut() {
            r.choice = active;
        }
        let c = &self.config;
        let gateway = Peer::gateway(self.sid(), &choice.driver);
        let spend = self.peer(role::SPEND);
        let (artifact, config) = (choice.driver.clone(), choice.config.clone());
        let timeout = c.call_timeout;
        let retry = super::call::Retry {
            max: c.max_retries,
            journal: self.peer(role::JOURNAL),
            session: self.sid().to_string(),
        };
        let max_output = u64::from(max_tokens);
        let traceparent = self.task_traceparent();
        let estimate = self.conversation.estimate(from);
        if let Some(r) = self.running.as_mut() {
            r.estimate = estimate;
        }
        // Behind the step before it, when that is not acknowledged yet.
        let gate = self.gate_for_call();
        let myself = myself.clone();
        let request = match wire {
            Ok(wire) => std::sync::Arc::new(wire),
            Err(source) => {
                // Not reachable with our own types; reported as the gateway reported it.
                let reply = InferReply::failed(InferenceError::Protocol { artifact, source });
                let _ = myself.cast(LoopMsg::InferenceDone { attempt, reply: Box::new(reply) });
                return;
            }
        };
        tokio::spawn(async move {
            let planned = super::call::PlannedCall {
                spend,
                gateway,
                artifact,
                config,
                task_id,
                request,
                estimate,
                max_output,
                timeout,
                frames: true,
                traceparent,
                gate,
            };
            let reply = super::call::admitted_call(planned, retry).await;
            let _ = myself.cast(LoopMsg::InferenceDone { attempt, reply: Box::new(reply) });
        });
    }

    pub(crate) async fn on_inference(&mut self, myself: &ActorRef<LoopMsg>, reply: InferReply) {
        if self.running.is_none() {
            return;
        }
        // The step the call followed: a call behind a refused gate sent nothing.
        if let Err(e) = self.settle().await {
            return self.fail_unjournaled(e).await;
        }
        let Some(r) = self.running.as_ref() else { return };
        let (task_id, turn) = (r.task_id.clone(), r.turn);
        let turn_ms = r.turn_started.elapsed().as_secs_f64() * 1000.0;
        self.emit(Frame::Text { id: task_id.clone(), text: String::new(), is_final: true });
        let estimate = self.running.as_ref().map(|r| r.estimate).unwrap_or(0);
        let usage = reply.result.as_ref().ok().and_then(|r| r.usage);
        if let Err(InferenceError::SpendRefused { refusal }) = &reply.result {
            let mut fields = refusal.trace_fields();
            fields["task_id"] = json!(task_id);
            self.trace(TraceKind::SpendCeilingReached, fields);
            let message = refusal.to_string();
            return self.finish(ExitStatus::SpendCeilingReached, message).await;
        }
        let choices = self.config.choices.clone();
        let used_choice = &choices[self.running.as_ref().map(|r| r.choice).unwrap_or(0)];
        let failure = reply.result.as_ref().err().map(|e| (e.code().as_str(), e.to_string()));
        let line = super::lines::InferenceLine {
            task_id: &task_id,
            turn,
            driver: &used_choice.driver,
            model: &used_choice.model,
            stop_reason: match &reply.result {
                Ok(resp) => super::lines::Stop::Model(resp.stop_reason),
                Err(_) => super::lines::Stop::Failed("error"),
            },
            error: failure.as_ref().map(|(code, message)| super::lines::CallFailure { code, message }),
            input_tokens_estimate: estimate,
            input_tokens_actual: usage.map(|u| u.input_tokens),
            output_tokens_actual: usage.map(|u| u.output_tokens),
            duration_ms: turn_ms,
            call_ms: reply.call_time.as_secs_f64() * 1000.0,
            instantiate_us: reply.instantiate_time.as_micros() as u64,
            instance_made_ahead: reply.made_ahead,
            // Without alternates nothing of the choices feature is written.
            driver_choice: self.config.stamp_producers.then_some(used_choice.name.as_str()),
        };
        let inference = self.event_of(TraceKind::Inference, &line);
        if let Some(r) = self.running.as_ref() {
            let decision = match &reply.result {
                Ok(resp) if resp.stop_reason == StopReason::ToolCall => "tool_call",
                Ok(_) => "final",
                Err(_) => "error",
            };
            let attributes = vec![
                opentelemetry::KeyValue::new("turn", i64::from(turn)),
                opentelemetry::KeyValue::new("input_tokens", usage.map_or(estimate, |u| u.input_tokens) as i64),
                opentelemetry::KeyValue::new("output_tokens", usage.map_or(0, |u| u.output_tokens) as i64),
                opentelemetry::KeyValue::new("decision", decision),
                opentelemetry::KeyValue::new("model", used_choice.model.clone()),
                opentelemetry::KeyValue::new("driver", used_choice.driver.clone()),
            ];
            self.span("capsule.inference", r.turn_started, attributes);
        }
        let resp = match reply.result {
            Err(e) => {
                self.trace_event(inference);
                // The provider's state after a failed call is unknown: the next call resends all.
                self.continuation = None;
                return self.finish(ExitStatus::Failed, e.to_string()).await;
            }
            Ok(resp) => resp,
        };
        let calls = super::call::tool_calls(&resp.content);
        let produced_by = self
            .config
            .stamp_producers
            .then(|| ProducedBy { driver: used_choice.driver.clone(), model: used_choice.model.clone() });
        let message =
            Message { role: Role::Assistant, content: resp.content, tool_call_id: None, is_error: None, produced_by };
        let text = message.text();
        // The `inference` line goes with the reply it produced: one append (one JetStream round
        // trip for both records) instead of a trace line the reply's append waits behind. So
        // does the first call's `tool_call_started` when nothing can come between them (no
        // `on-inference` hook; a declared tool, not the agent's switch): the records and their
        // order are those of separate appends.
        let mut events = vec![inference];
        let first = calls.first().filter(|_| resp.stop_reason == StopReason::ToolCall);
        let started_too = first.filter(|c| !self.hooked("on-inference") && self.runs_as_tool(&c.1));
        if let Some((id, name, input)) = started_too.map(|c| &**c) {
            events.push(self.started_event(&task_id, id, name, input));
        }
        let started_journaled = started_too.is_some();
        if let Err(e) = self.record_with(message, events).await {
            return self.fail_unjournaled(e).await;
        }
        let output_tokens = usage.map(|u| u.output_tokens).unwrap_or_else(|| crate::spend::tokens::count(&text));
        let input_tokens = usage.map(|u| u.input_tokens).unwrap_or(estimate);
        self.inference_answered(input_tokens, output_tokens, &text, &calls).await;
        self.continuation = match reply.continuation_id {
            Some(id) if !id.is_empty() => Some(super::HeldContinuation {
                id,
                acked: self.conversation.len(),
                choice: self.running.as_ref().map(|r| r.choice).unwrap_or(0),
            }),
            _ => None,
        };
        match resp.stop_reason {
            StopReason::ToolCall if !calls.is_empty() => {
                if let Some(r) = self.running.as_mut() {
                    r.calls = calls;
                    r.next_call = 0;
                    r.started_journaled = started_journaled;
                }
                self.run_next_call(myself).await;
            }
            _ => {
                if let Some((hook, reason)) = self.task_ending(ExitStatus::Ok.as_str()).await {
                    let feedback = format!(
                        "The previous answer was not accepted. Feedback from hook `{hook}`:\n{}\nAddress it, then answer again.",
                        reason.trim()
                    );
                    if let Err(e) = self.record(Message::user_text(feedback)).await {
                        return self.fail_unjournaled(e).await;
                    }
                    return self.next_turn(myself).await;
                }
                self.finish(ExitStatus::Ok, text).await
            }
        }
    }

    pub(crate) async fn finish(&mut self, status: ExitStatus, text: String) {
        // A task that ends while its last step is unacknowledged (canceled while the call
        // waits) ends after it; a failed write was that step's, and the end is still reported.
        if let Err(e) = self.settle().await {
            tracing::error!(session = self.sid(), error = %e, "the task's last step could not be journaled");
        }
        // `on-task-end` for every end; a reopen it asks for is honoured only where the task
        // ended ok (`on_inference`), so here it is traced refused.
        self.task_ending(status.as_str()).await;
        let Some(mut r) = self.running.take() else { return };
        let result_text = if status == ExitStatus::Ok { text.clone() } else { format!("error: {text}") };
        let result_path = self.config.out_dir.join("result.txt");
        let written = capsule_runtime::Beneath::file_at(&result_path, capsule_runtime::FileMode::Truncate)
            .map_err(std::io::Error::other)
            .and_then(|mut f| std::io::Write::write_all(&mut f, result_text.as_bytes()));
        if let Err(e) = written {
            tracing::error!(error = %e, code = %Code::SessionIo, path = %result_path.display(), "cannot write result.txt");
        }
        let turns = r.turn;
        if let Some(cx) = r.span.take() {
            crate::otel::Telemetry::end_task(&cx, status.as_str());
        }
        self.trace(
            TraceKind::TaskEnd,
            json!({"task_id": r.task_id, "exit_status": status.as_str(), "turns": turns, "duration_ms": r.started.elapsed().as_millis() as u64, "message": if status == ExitStatus::Ok { serde_json::Value::Null } else { json!(text) }}),
        );
        self.flush().await;
        let (state, response, message) = match status {
            ExitStatus::Ok => (TaskState::Completed, Some(text.clone()), "completed".to_string()),
            ExitStatus::Canceled => (TaskState::Canceled, None, text.clone()),
            _ => (TaskState::Failed, None, text.clone()),
        };
        self.emit(Frame::Status {
            id: r.task_id.clone(),
            context_id: r.context_id.clone(),
            status: StatusBody { state, message: message.clone(), response },
            is_final: true,
        });
        self.tasks.insert(
            r.task_id.clone(),
            TaskRecord {
                id: r.task_id.clone(),
                context_id: r.context_id.clone(),
                state,
                message: message.clone(),
                response: if status == ExitStatus::Ok { Some(text.clone()) } else { None },
            },
        );
        let outcome = TaskOutcome {
            task_id: r.task_id.clone(),
            context_id: r.context_id.clone(),
            exit_status: status,
            message: if status == ExitStatus::Ok { text } else { message },
            result_path,
        };
        if let Some(reply) = r.reply.take() {
            let _ = reply.send(outcome);
        }
    }

    pub(crate) async fn end_session(&mut self) {
        if self.running.is_some() {
            self.finish(ExitStatus::Canceled, "the session ended before the task finished".into()).await;
        }
        self.session_ended("ok").await;
        self.trace(TraceKind::SessionEnd, json!({"tasks": self.attempts}));
        self.flush().await;
        if let Some(t) = &self.config.telemetry {
            t.end("ok").await;
        }
    }
}
