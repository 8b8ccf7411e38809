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
use crate::wire::{Envelope, EnvelopeKey, WireRequest};

/// The conversation with its serialized form and token counts (see the module docs).
#[derive(Debug)]
pub(crate) struct Context {
    messages: Vec<Message>,
    json: Vec<Box<RawValue>>,
    counter: TokenCounter,
    /// The request's fields for the current key ([`Context::fields`]).
    envelope: Option<Envelope>,
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
        let mut context = Context {
            messages: Vec::with_capacity(messages.len()),
            json: Vec::new(),
            counter: TokenCounter::new(),
            envelope: None,
        };
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

    /// Make the next request's fields those of `key`: serialized by [`Envelope::of`] from what
    /// `fields` builds (its messages are not looked at) only when the last ones were for
    /// another key. The loop's system prompt, tools and params do not change in its life.
    pub(crate) fn fields(
        &mut self,
        key: &EnvelopeKey<'_>,
        fields: impl FnOnce() -> DriverRequest,
    ) -> Result<(), serde_json::Error> {
        if !self.envelope.as_ref().is_some_and(|e| e.is_for(key)) {
            // Fields that fail to serialize leave none, never the last key's.
            self.envelope = None;
            self.envelope = Some(Envelope::of(&fields())?);
        }
        Ok(())
    }

    /// The spend estimate of the request with the current fields sending the messages from
    /// `from` on (the fields alone count nothing before [`Context::fields`]).
    pub(crate) fn estimate(&mut self, from: usize) -> u64 {
        let sent = self.messages.len().saturating_sub(from);
        self.counter.estimate_serialized(self.envelope.as_ref().map_or("", Envelope::text), sent)
    }

    /// The request a driver receives: the current fields ([`Context::fields`]) and the
    /// messages from `from` on as `to` may see them, from their cached JSON.
    pub(crate) fn wire_request(&self, from: usize, to: &ProducedBy) -> Result<WireRequest, serde_json::Error> {
        let Some(envelope) = &self.envelope else {
            return Err(<serde_json::Error as serde::ser::Error>::custom("no request fields were set"));
        };
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
        Ok(envelope.with_messages(&parts))
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

    fn key(r: &DriverRequest) -> EnvelopeKey<'_> {
        EnvelopeKey {
            model: &r.model,
            max_tokens: r.max_tokens,
            continuation_id: r.continuation_id.as_deref(),
            prompt_cache_key: &r.prompt_cache_key,
        }
    }

    #[test]
    fn a_request_from_cached_json_is_the_serialized_request() {
        let mut context = Context::new(history());
        context.fields(&key(&envelope()), envelope).expect("fields");
        for to in [producer("a"), producer("b")] {
            for from in 0..=history().len() {
                let wire = context.wire_request(from, &to).expect("built");
                assert_eq!(wire.json, serialized(from, &to), "from {from}, to {}", to.driver);
                assert_eq!(wire.model, "claude-x");
            }
        }
        // Another producer's thinking blocks are left out; the producer's own are kept.
        let other = context.wire_request(0, &producer("b")).expect("built");
        assert!(!other.json.contains("thinking") && other.json.contains("calling"));
        assert!(context.wire_request(0, &producer("a")).expect("built").json.contains("redacted_thinking"));
    }

    #[test]
    fn the_fields_are_built_again_exactly_when_their_key_changes() {
        let mut context = Context::new(history());
        let mut builds = 0;
        for _ in 0..3 {
            context
                .fields(&key(&envelope()), || {
                    builds += 1;
                    envelope()
                })
                .expect("fields");
        }
        assert_eq!(builds, 1, "the same key reuses the serialized fields");
        // Each part of the key: another model, cap, continuation id or cache key is sent.
        let changes: [fn(&mut DriverRequest); 4] = [
            |r| r.model = "claude-y".into(),
            |r| r.max_tokens = 65,
            |r| r.continuation_id = None,
            |r| r.prompt_cache_key = "cap:1:other".into(),
        ];
        for change in changes {
            // From the first fields each time, so each part alone is what changed.
            context.fields(&key(&envelope()), envelope).expect("fields");
            let mut changed = envelope();
            change(&mut changed);
            context.fields(&key(&changed), || changed.clone()).expect("fields");
            let mut whole = changed.clone();
            whole.messages = history()[1..].iter().map(|m| super::super::call::wire_view(m, &producer("a"))).collect();
            let wire = context.wire_request(1, &producer("a")).expect("built");
            assert_eq!(wire.json, serde_json::to_string(&whole).expect("serializes"));
            assert_eq!(wire.model, changed.model);
        }
        // A system prompt holding what the key looks like does not move where messages go.
        let mut tricky = envelope();
        tricky.system = "\"messages\":[] and \\\"messages\\\":[]".into();
        tricky.prompt_cache_key = "tricky".into();
        context.fields(&key(&tricky), || tricky.clone()).expect("fields");
        let mut whole = tricky.clone();
        whole.messages = history()[3..].to_vec();
        assert_eq!(
            context.wire_request(3, &producer("a")).expect("built").json,
            serde_json::to_string(&whole).expect("ok")
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
        context.fields(&key(&envelope()), envelope).expect("fields");
        assert_eq!(context.estimate(1), counter.estimate(&full));
        context.push(Message::user_text("more"));
        assert_eq!(context.len(), 5);
        assert!(context.tokens_since(0) > counter.messages_since(0));
    }
}
