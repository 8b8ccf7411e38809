//! A hook's `run-inference`: one completion through the session's **primary** driver choice
//! (internal calls never follow a switch, seed 000), admitted and settled by the spend meter
//! like any agent-loop call, with no frames on the event stream. Each call is traced
//! `hook_inference`.

use capsule_protocol::neutral::DriverRequest;
use capsule_protocol::trace::{TraceEvent, TraceKind};
use capsule_runtime::{GuestEvents, InferenceAnswer, InferenceAsk, InferenceReplyText};
use serde_json::json;
use std::time::Duration;

use crate::agent_loop::call::{PlannedCall, Retry, admitted_call};
use crate::choices::DriverChoice;
use crate::journal::JournalMsg;
use crate::names::role;
use crate::peer::Peer;

/// Serves one hook's `run-inference`.
#[derive(Debug, Clone)]
pub struct HookInference {
    /// Session id.
    pub session_id: String,
    /// The hook's name (traces and the prompt cache key).
    pub hook: String,
    /// The primary choice.
    pub primary: DriverChoice,
    /// How long the gateway may take.
    pub timeout: Duration,
    /// `inference.max_retries`.
    pub max_retries: u32,
}

impl GuestEvents for HookInference {
    fn chunk(&self, _: String) {}
    fn thinking(&self, _: String) {}
    fn tool_call_started(&self, _: String, _: String) {}
    fn tool_call_input_bytes(&self, _: String, _: u64) {}

    fn run_inference(&self, ask: InferenceAsk) -> InferenceAnswer {
        let me = self.clone();
        Box::pin(async move { me.complete(ask).await })
    }
}

impl HookInference {
    async fn complete(self, ask: InferenceAsk) -> Result<InferenceReplyText, String> {
        let p = &self.primary;
        let model = ask.model.clone().unwrap_or_else(|| p.model.clone());
        let messages = crate::hook_messages::from_hook(&ask.messages);
        let request = DriverRequest {
            model: model.clone(),
            max_tokens: p.max_tokens,
            system: ask.system_prompt.clone().unwrap_or_default(),
            messages,
            tools: Vec::new(),
            params: Default::default(),
            continuation_id: None,
            prompt_cache_key: format!("hook:{}", self.hook),
        };
        let estimate = crate::spend::tokens::TokenCounter::new().estimate(&request);
        let request = match crate::wire::WireRequest::of(&request) {
            Ok(r) => r,
            Err(e) => return Err(format!("the hook's inference request cannot be serialized: {e}")),
        };
        let journal = Peer::of(&self.session_id, role::JOURNAL);
        let planned = PlannedCall {
            spend: Peer::of(&self.session_id, role::SPEND),
            gateway: Peer::gateway(&self.session_id, &p.driver),
            artifact: p.driver.clone(),
            config: p.config.clone(),
            task_id: String::new(),
            request: std::sync::Arc::new(request),
            estimate,
            max_output: u64::from(p.max_tokens),
            timeout: self.timeout,
            frames: false,
            traceparent: None,
            gate: None,
        };
        let retry = Retry { max: self.max_retries, journal: journal.clone(), session: self.session_id.clone() };
        let reply = admitted_call(planned, retry).await;
        let result = match reply.result {
            Ok(resp) => {
                let text: String = resp
                    .content
                    .iter()
                    .filter_map(|b| match b {
                        capsule_protocol::neutral::Block::Text { text } => Some(text.as_str()),
                        _ => None,
                    })
                    .collect();
                let output_tokens = crate::spend::tokens::count(&text);
                Ok(InferenceReplyText { text, model_used: model.clone(), input_tokens: estimate, output_tokens })
            }
            Err(e) => Err(format!("{} ({})", e, e.code().as_str())),
        };
        let fields = match &result {
            Ok(r) => {
                json!({"hook": self.hook, "model": model, "driver": p.driver, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens, "error": null})
            }
            Err(e) => {
                json!({"hook": self.hook, "model": model, "driver": p.driver, "input_tokens": estimate, "output_tokens": 0, "error": e})
            }
        };
        let line = TraceEvent::new(TraceKind::HookInference, &self.session_id, crate::now_ms(), fields);
        if let Err(e) = journal.tell(JournalMsg::Trace(line)) {
            tracing::error!(session = self.session_id, error = %e, "a hook_inference line was not written");
        }
        result
    }
}
