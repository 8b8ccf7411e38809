//! The tool calls of a turn: run each in order through the tools actor (or the runtime's own
//! `switch-driver`), journal its result before the next step, emit its `artifact` frame, and
//! keep a long result whole in a file.

use capsule_protocol::Code;
use capsule_protocol::frame::{ARTIFACT_FRAME_BYTES, ArtifactBody, Frame, prefix};
use capsule_protocol::neutral::Message;
use capsule_protocol::trace::TraceKind;
use ractor::ActorRef;
use std::sync::Arc;
use std::time::Instant;

use super::{LoopMsg, LoopState};
use crate::coalescer::CoalescerMsg;
use crate::names::role;
use crate::tools::{ToolAnswer, ToolRunReply, ToolsMsg};

impl LoopState {
    /// The `tool_call_started` line of call `call_id`.
    pub(crate) fn started_event(
        &self,
        task_id: &str,
        call_id: &str,
        name: &str,
        input: &serde_json::Value,
    ) -> capsule_protocol::trace::TraceEvent {
        let line = super::lines::ToolStartedLine { task_id, tool_call_id: call_id, tool_name: name, input };
        self.event_of(TraceKind::ToolCallStarted, &line)
    }

    pub(crate) async fn run_pending(&mut self, myself: &ActorRef<LoopMsg>) {
        self.run_next_call(myself).await;
    }

    /// Whether a call of `name` runs a declared tool (not the agent's switch, not a refusal).
    pub(crate) fn runs_as_tool(&self, name: &str) -> bool {
        let switch = name == crate::choices::SWITCH_TOOL && self.config.agent_switch;
        !switch && self.config.tools.iter().any(|t| t.name == name)
    }

    pub(crate) async fn run_next_call(&mut self, myself: &ActorRef<LoopMsg>) {
        let Some(r) = self.running.as_mut() else { return };
        let Some(call) = r.calls.get(r.next_call).cloned() else {
            return self.next_turn(myself).await;
        };
        let (_, name, input) = &*call;
        // Serialized once: the tools actor gets this text and the call's span its length.
        let input_text = json_text(input);
        r.call_input_bytes = input_text.len();
        r.call_started = Instant::now();
        let started_journaled = std::mem::take(&mut r.started_journaled);
        let attempt = r.attempt;
        if name == crate::choices::SWITCH_TOOL && self.config.agent_switch {
            let target = input.get("driver").cloned().unwrap_or(serde_json::Value::Null);
            let reply = match self.switch(&target, crate::control::Principal::Agent).await {
                Ok(ch) => ToolRunReply {
                    content: format!(
                        "switched the driver choice from {} to {}; it applies from the next inference call",
                        ch.previous, ch.value
                    ),
                    is_error: false,
                    duration_ms: 0,
                    truncated: false,
                    code: None,
                    made_ahead: false,
                },
                Err(r) => ToolRunReply {
                    content: format!("{r} ({})", r.reason()),
                    is_error: true,
                    duration_ms: 0,
                    truncated: false,
                    code: None,
                    made_ahead: false,
                },
            };
            let _ = myself.cast(LoopMsg::ToolDone { attempt, reply });
            return;
        }
        if !self.config.tools.iter().any(|t| &t.name == name) {
            let declared: Vec<&str> = self.config.tools.iter().map(|t| t.name.as_str()).collect();
            let content = format!(
                "tool `{name}` is not declared in this capsule; available tools: {}",
                if declared.is_empty() { "none".to_string() } else { declared.join(", ") }
            );
            let reply = ToolRunReply {
                content,
                is_error: true,
                duration_ms: 0,
                truncated: false,
                code: None,
                made_ahead: false,
            };
            let _ = myself.cast(LoopMsg::ToolDone { attempt, reply });
            return;
        }
        if !started_journaled {
            let task_id = self.running.as_ref().map(|r| r.task_id.clone()).unwrap_or_default();
            let started = self.started_event(&task_id, &call.0, name, input);
            if let Err(e) = self.journal(Vec::new(), vec![started]).await {
                return self.fail_unjournaled(e).await;
            }
        }
        let events: Arc<dyn capsule_runtime::GuestEvents> =
            Arc::new(super::ask::InputAsker::new(myself.clone(), attempt));
        // The tools actor answers the loop directly. No timeout here: the tool's own deadline
        // (`deadline_seconds`) bounds the call. A tools actor that is down, or crashes with the
        // call, drops the answer, which then tells the loop it crashed.
        let loop_ref = myself.clone();
        let answer = ToolAnswer::new(move |reply| {
            let _ = loop_ref.cast(LoopMsg::ToolDone { attempt, reply });
        });
        let run = ToolsMsg::Run { name: name.clone(), input: input_text, events, answer };
        if let Err(e) = self.peer(role::TOOLS).tell(run) {
            tracing::warn!(session = self.sid(), error = %e, "a tool call could not be handed to the tools actor");
        }
    }

    pub(crate) async fn on_tool_done(&mut self, myself: &ActorRef<LoopMsg>, reply: ToolRunReply) {
        let Some(r) = self.running.as_mut() else { return };
        let Some(call) = r.calls.get(r.next_call).cloned() else { return };
        let (id, name, input) = &*call;
        r.next_call += 1;
        let last = r.next_call >= r.calls.len();
        let task_id = r.task_id.clone();
        let call_started = r.call_started;
        let input_bytes = r.call_input_bytes;
        let _ = self.peer(role::COALESCER).tell(CoalescerMsg::Settle { id: id.clone() });
        // A long result: the model gets all of it (the conversation record), the trace and the
        // frame only the first ARTIFACT_FRAME_BYTES, and one file keeps it whole.
        let long = reply.content.len() > ARTIFACT_FRAME_BYTES;
        let output_file = if long { self.keep_output(id, &reply.content) } else { None };
        let shown = prefix(&reply.content, ARTIFACT_FRAME_BYTES).to_string();
        let finished = self.event_of(
            TraceKind::ToolCall,
            &super::lines::ToolCallLine {
                call: super::lines::ToolStartedLine { task_id: &task_id, tool_call_id: id, tool_name: name, input },
                is_error: reply.is_error,
                duration_ms: reply.duration_ms,
                instance_made_ahead: reply.made_ahead,
                code: reply.code,
                content: &shown,
                content_bytes: reply.content.len(),
                output_file: output_file.as_deref(),
            },
        );
        let result = Message::tool_result(id.clone(), reply.content.clone(), reply.is_error);
        // The turn's last result is followed by the next provider call, which waits behind a
        // gate for its write (`unacked.rs`); nothing else acts before it is settled. With an
        // `on-tool-call` hook, which acts next, the write is awaited here.
        let events = vec![finished];
        let recorded = if last && !self.hooked("on-tool-call") {
            self.record_unacked(result, events).await
        } else {
            self.record_with(result, events).await
        };
        if let Err(e) = recorded {
            return self.fail_unjournaled(e).await;
        }
        self.span(
            "capsule.tool_call",
            call_started,
            vec![
                opentelemetry::KeyValue::new("tool_name", name.clone()),
                opentelemetry::KeyValue::new("input_bytes", input_bytes as i64),
                opentelemetry::KeyValue::new("output_bytes", reply.content.len() as i64),
                opentelemetry::KeyValue::new("status", if reply.is_error { "failed" } else { "passed" }),
            ],
        );
        self.tool_answered(name, input_bytes as u64, &reply).await;
        self.emit(Frame::Artifact {
            id: task_id,
            artifact: ArtifactBody {
                tool_name: Some(name.clone()),
                content: Some(shown),
                fence_source: None,
                tool_call_id: Some(id.clone()),
                is_error: Some(reply.is_error),
                duration_ms: Some(reply.duration_ms),
                exit_code: None,
                truncated: Some(reply.truncated || long),
                output_file,
            },
        });
        self.run_next_call(myself).await;
    }

    /// Keep a long tool result whole in `out/tool-<call>.txt` (`0600`, never through a link);
    /// its path relative to the session folder, or `None` when it could not be written (the
    /// conversation record still has it).
    fn keep_output(&self, call_id: &str, content: &str) -> Option<String> {
        use sha2::Digest;
        // The call id comes from the provider: name the file by a hash of it.
        let digest = sha2::Sha256::digest(call_id.as_bytes());
        let name = format!("tool-{}.txt", hex::encode(&digest[..8]));
        let written =
            capsule_runtime::Beneath::open(&self.config.out_dir).and_then(|d| d.write(&name, content.as_bytes()));
        match written {
            Ok(()) => Some(format!("out/{name}")),
            Err(e) => {
                tracing::error!(error = %e, code = %Code::SessionIo, "cannot keep a long tool result");
                None
            }
        }
    }
}

/// A value's compact JSON text. `serde_json::to_string` writes straight into the string;
/// `Value`'s `Display` (`to_string()`) goes through the formatter a piece at a time, several
/// times slower. A `Value` always serializes (its keys are strings).
fn json_text(value: &serde_json::Value) -> String {
    serde_json::to_string(value).unwrap_or_default()
}
