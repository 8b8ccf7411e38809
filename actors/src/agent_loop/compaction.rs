//! Context occupancy and compaction.
//!
//! Occupancy is the incremental cl100k count of the whole history (each message counted once,
//! as serialized, thinking blocks included), read before every turn. When it reaches
//! `inference.compaction.threshold` of the window (`context.max_tokens`, else the choice's
//! window), the `on-compaction` hooks get the full history. A `replace-context` is committed
//! only when every tool call it issues is answered in it; the commit is journaled (a marker
//! and the new context in the conversation record, `compaction` in the trace) before the
//! context changes, then the count is redone and the held continuation id dropped. Compaction
//! never costs a turn. With no hook, or no usable replacement, the context stays as it is
//! (`compaction_declined`); a hook that fails makes the task fail (`E-RUN-094`), since the next
//! turn would not fit.

use capsule_protocol::Code;
use capsule_protocol::trace::TraceKind;
use capsule_runtime::{HookEvent, HookOutput};
use serde_json::json;

use super::LoopState;
use crate::hook_messages::{from_hook, pairs_hold, to_hook};

/// `inference.compaction` and `context.max_tokens`, as the loop uses them.
#[derive(Debug, Clone, PartialEq)]
pub struct CompactionConfig {
    /// Fraction of the window at which compaction runs.
    pub threshold: f64,
    /// `context.max_tokens`; the choice's window when `None`.
    pub window: Option<u32>,
    /// Handed to the hook.
    pub model: Option<String>,
    /// Handed to the hook.
    pub system_prompt: Option<String>,
}

impl LoopState {
    /// Tokens of the whole history now.
    pub(crate) fn occupancy(&self) -> u64 {
        self.conversation.tokens_since(0)
    }

    /// Compact when the history fills `choice_window` past the threshold; `Err` (a message
    /// with its code) when the compaction hook failed.
    pub(crate) async fn compact_if_full(&mut self, choice_window: u32) -> Result<(), String> {
        let began = std::time::Instant::now();
        let c = self.config.compaction.clone();
        let window = c.window.unwrap_or(choice_window);
        let before = self.occupancy();
        if window == 0 || (before as f64) < c.threshold * f64::from(window) {
            return Ok(());
        }
        // Compaction acts (hooks, a summary call, the journal): the step before it first.
        self.settle().await.map_err(|e| e.to_string())?;
        let (task_id, turn) = self.running.as_ref().map(|r| (r.task_id.clone(), r.turn)).unwrap_or_default();
        let ratio = before as f64 / f64::from(window);
        let base = json!({"task_id": task_id, "turn": turn, "tokens_before": before, "window": window, "threshold": c.threshold});
        let declined = |reason: &str, detail: String| {
            let mut f = base.clone();
            f["reason"] = json!(reason);
            f["detail"] = json!(detail);
            f
        };
        if !self.hooked("on-compaction") {
            let f = declined("no_hook_replacement", "no hook is bound to on-compaction".into());
            self.trace(TraceKind::CompactionDeclined, f);
            return Ok(());
        }
        let event = HookEvent::Compaction {
            messages: to_hook(&self.conversation),
            session_tokens: before,
            threshold: ratio,
            model: c.model.clone(),
            system_prompt: c.system_prompt.clone(),
        };
        let fired = self.fire(event).await;
        if let Some((hook, why)) = fired.failed {
            return Err(format!(
                "{}: the compaction hook `{hook}` failed ({why}); the history ({before} tokens) no longer fits {:.0}% of the {window}-token window, so the task cannot go on",
                Code::CompactionFailed,
                c.threshold * 100.0
            ));
        }
        let replacement = fired.honoured.into_iter().find_map(|(hook, o)| match o {
            HookOutput::ReplaceContext(m) => Some((hook, m)),
            _ => None,
        });
        let Some((hook, replacement)) = replacement else {
            let f = declined("no_hook_replacement", "no hook returned replace-context".into());
            self.trace(TraceKind::CompactionDeclined, f);
            return Ok(());
        };
        let candidate = from_hook(&replacement);
        if candidate.is_empty() || !pairs_hold(&candidate) {
            let detail = if candidate.is_empty() {
                format!("hook `{hook}` returned an empty context")
            } else {
                format!("hook `{hook}` returned a context whose tool calls and tool results do not pair up")
            };
            let reason = if candidate.is_empty() { "empty_replacement" } else { "tool_pairs" };
            self.trace(TraceKind::CompactionDeclined, declined(reason, detail));
            return Ok(());
        }
        let candidate = super::context::Context::new(candidate);
        let after = candidate.tokens_since(0);
        let mut fields = base.clone();
        fields["hook"] = json!(hook);
        fields["tokens_after"] = json!(after);
        fields["messages_before"] = json!(self.conversation.len());
        fields["messages_after"] = json!(candidate.len());
        let event =
            capsule_protocol::trace::TraceEvent::new(TraceKind::Compaction, self.sid(), crate::now_ms(), fields);
        let replace = |reply| crate::journal::JournalMsg::Replace {
            events: vec![event],
            messages: candidate.serialized(),
            reply,
        };
        match self.peer(crate::names::role::JOURNAL).ask(replace, crate::peer::wait::JOURNAL).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => return Err(e.to_string()),
            Err(e) => return Err(e.to_string()),
        }
        self.conversation = candidate;
        self.continuation = None;
        self.span(
            "capsule.compaction",
            began,
            vec![
                opentelemetry::KeyValue::new("tokens_before", before as i64),
                opentelemetry::KeyValue::new("tokens_after", after as i64),
                opentelemetry::KeyValue::new("hook", hook),
            ],
        );
        Ok(())
    }
}
