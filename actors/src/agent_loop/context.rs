//! The loop's context: the conversation it acts on, each message's JSON and its token count.
//!
//! What it is for: a driver call sends the whole history (or its tail after a continuation
//! id) every turn. Cloning every message into a fresh request and serializing it again made a
//! turn's host cost grow with the conversation. Here each message is serialized once, when it
//! enters the context; that JSON is counted for the spend estimate ([`TokenCounter`]) and
//! spliced verbatim into every later request ([`Context::wire_request`]).
//!
//! What it guarantees: the three views (messages, their JSON, their counts) always have the
//! same length, because only [`Context::push`] and [`Context::new`] change them. A request built
//! here is byte for byte what serializing the [`DriverRequest`] with
//! [`wire_view`](super::call::wire_view)ed messages gives (checked in the tests).
//!
//! What it does not do: notice edits of a message in place (there are none: the history is
//! append-only, and compaction replaces the whole context).

use capsule_protocol::neutral::{Block, DriverRequest, Message, ProducedBy};
use serde_json::value::RawValue;

use crate::spend::tokens::TokenCounter;
use crate::wire::WireRequest;

/// The conversation with its serialized form and token counts (see the module docs).
#[derive(Debug)]
pub(crate) struct Context {
    messages: Vec<Message>,
    json: Vec<Box<RawValue>>,
    counter: TokenCounter,
}

impl Default for Context {
    fn default() -> Self {
        Context::new(Vec::new())
    }
}

impl std::ops::Deref for Context {
    type Target = [Message];
    fn deref(&self) -> &[Message] {
        &self.messages
    }
}

impl Context {
    /// A context holding `messages` (restored, or a compaction's replacement).
    pub(crate) fn new(messages: Vec<Message>) -> Self {
        let mut context =
            Context { messages: Vec::with_capacity(messages.len()), json: Vec::new(), counter: TokenCounter::new() };
        for m in messages {
            context.push(m);
        }
        context
    }

    /// Add a message (already journaled by the caller).
    pub(crate) fn push(&mut self, m: Message) {
        // Serializing our own types cannot fail (string keys, no non-finite floats); if it ever
        // did, the message is counted as `null` and sent by the fallback path of `wire_request`.
        let json = serde_json::value::to_raw_value(&m).unwrap_or_else(|_| null());
        self.push_serialized(m, json);
    }

    /// Add a message with its JSON (`serde_json` of `m`, as the caller journaled it).
    pub(crate) fn push_serialized(&mut self, m: Message, json: Box<RawValue>) {
        self.counter.push_json(json.get());
        self.json.push(json);
        self.messages.push(m);
    }

    /// Forget the messages from position `len` on (a step whose write failed).
    pub(crate) fn truncate(&mut self, len: usize) {
        self.messages.truncate(len);
        self.json.truncate(len);
        self.counter.truncate(len);
    }

    /// Every message's JSON, in order (for the journal when the context replaces another).
    pub(crate) fn serialized(&self) -> Vec<Box<RawValue>> {
        self.json.clone()
    }

    /// Tokens of the messages from position `from` on.
    pub(crate) fn tokens_since(&self, from: usize) -> u64 {
        self.counter.messages_since(from)
    }

    /// The spend estimate of `request` (its `messages` left empty) sending the messages from
    /// `from` on.
    pub(crate) fn estimate(&mut self, request: &DriverRequest, from: usize) -> u64 {
        self.counter.estimate_envelope(request, self.messages.len().saturating_sub(from))
    }

    /// The request a driver receives: `request`'s fields (its `messages` left empty) and the
    /// messages from `from` on as `to` may see them, from their cached JSON.
    pub(crate) fn wire_request(
        &self,
        request: &DriverRequest,
        from: usize,
        to: &ProducedBy,
    ) -> Result<WireRequest, serde_json::Error> {
        let from = from.min(self.messages.len());
        let mut filtered: Vec<(usize, Box<RawValue>)> = Vec::new();
        for (i, m) in self.messages.iter().enumerate().skip(from) {
            if needs_filtering(m, to) || self.json[i].get() == "null" {
                filtered.push((i, serde_json::value::to_raw_value(&super::call::wire_view(m, to))?));
            }
        }
        let mut next = filtered.iter().peekable();
        let parts: Vec<&RawValue> = (from..self.messages.len())
            .map(|i| match next.peek() {
                Some((at, raw)) if *at == i => {
                    next.next();
                    &**raw
                }
                _ => &*self.json[i],
            })
            .collect();
        WireRequest::with_messages(request, &parts)
    }
}

/// Whether `to` must not see some of `m`'s blocks (see [`super::call::wire_view`]).
fn needs_filtering(m: &Message, to: &ProducedBy) -> bool {
    m.produced_by.as_ref().is_some_and(|p| p != to)
        && m.content.iter().any(|b| matches!(b, Block::Thinking { .. } | Block::RedactedThinking { .. }))
}

fn null() -> Box<RawValue> {
    RawValue::from_string("null".into()).unwrap_or_else(|_| unreachable!("`null` is JSON"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_protocol::neutral::Role;
    use serde_json::json;

    fn producer(driver: &str) -> ProducedBy {
        ProducedBy { driver: driver.into(), model: "m".into() }
    }

    fn history() -> Vec<Message> {
        let thinking = Message {
            role: Role::Assistant,
            content: vec![
                Block::Thinking { text: "hmm \"quoted\" \u{e9}".into(), signature: "sig".into() },
                Block::RedactedThinking { data: "opaque".into() },
                Block::Text { text: "calling".into() },
                Block::ToolCall { id: "c1".into(), name: "files".into(), input: json!({"op": "list", "n": 1.5}) },
            ],
            tool_call_id: None,
            is_error: None,
            produced_by: Some(producer("a")),
        };
        vec![
            Message::user_text("hi\n\u{1F600}"),
            thinking,
            Message::tool_result("c1", "a\nb", false),
            Message::user_text("next"),
        ]
    }

    fn envelope() -> DriverRequest {
        DriverRequest {
            model: "claude-x".into(),
            max_tokens: 64,
            system: "be brief".into(),
            messages: Vec::new(),
            tools: Vec::new(),
            params: [("temperature".to_string(), json!(0.5))].into_iter().collect(),
            continuation_id: Some("k".into()),
            prompt_cache_key: "cap:1:ctx".into(),
        }
    }

    /// What the loop sent before the cache: the whole request, messages wire-viewed, serialized.
    fn serialized(from: usize, to: &ProducedBy) -> String {
        let mut r = envelope();
        r.messages = history()[from..].iter().map(|m| super::super::call::wire_view(m, to)).collect();
        serde_json::to_string(&r).expect("a request serializes")
    }

    #[test]
    fn a_request_from_cached_json_is_the_serialized_request() {
        let context = Context::new(history());
        for to in [producer("a"), producer("b")] {
            for from in 0..=history().len() {
                let wire = context.wire_request(&envelope(), from, &to).expect("built");
                assert_eq!(wire.json, serialized(from, &to), "from {from}, to {}", to.driver);
                assert_eq!(wire.model, "claude-x");
            }
        }
        // Another producer's thinking blocks are left out; the producer's own are kept.
        let other = context.wire_request(&envelope(), 0, &producer("b")).expect("built");
        assert!(!other.json.contains("thinking") && other.json.contains("calling"));
        assert!(
            context.wire_request(&envelope(), 0, &producer("a")).expect("built").json.contains("redacted_thinking")
        );
    }

    #[test]
    fn counts_and_estimates_match_counting_the_messages_themselves() {
        let mut context = Context::new(history());
        let mut counter = TokenCounter::new();
        for m in history() {
            counter.push(&m);
        }
        assert_eq!(context.len(), 4);
        assert_eq!(context.tokens_since(0), counter.messages_since(0));
        assert_eq!(context.tokens_since(2), counter.messages_since(2));
        let mut full = envelope();
        full.messages = history()[1..].to_vec();
        assert_eq!(context.estimate(&envelope(), 1), counter.estimate(&full));
        context.push(Message::user_text("more"));
        assert_eq!(context.len(), 5);
        assert!(context.tokens_since(0) > counter.messages_since(0));
    }
}
