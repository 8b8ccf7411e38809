//! The token estimate of CONTRACT §6: cl100k over the serialized payload, whatever the provider.
//!
//! What it is for: the spend meter reserves `estimate + max output` before every driver call,
//! so the estimate is computed once per turn and must not grow with the conversation.
//! [`TokenCounter`] counts each [`Message`] once, when it enters the context (its JSON form,
//! cached by position), and the request's fixed part (model, system prompt, tools, params) once
//! for as long as it does not change; the estimate of a request is the sum. A turn therefore
//! costs only its new content.
//!
//! What it guarantees: [`count`] is the exact cl100k count of a text (the same as tiktoken's
//! `encode_ordinary`, checked against `tiktoken-rs` in the tests). [`TokenCounter::estimate`]
//! is within [`TOLERANCE_PERCENT`] % (+ [`TOLERANCE_TOKENS`]) of counting the whole serialized
//! request in one go, and never below it in the tests: BPE merges across the seams between
//! messages are what differ, and one token per seam is added so the estimate leans high.
//!
//! What it does not do: count what a provider's own tokenizer would (provider counts are
//! recorded beside the estimate), or notice that a message already counted was edited in place
//! (the stored history is append-only; call [`TokenCounter::truncate`] when it is cut).
//!
//! Encoder: our own compact cl100k counter ([`super::cl100k`]): the same counts as tiktoken
//! (checked against `tiktoken-rs` and `bpe-openai` in its tests), from tables embedded in the
//! binary (about 2 MiB) instead of `bpe-openai`'s in-memory encoder (about 32 MiB resident, the
//! largest single cost of a capsule process). Figures: `cargo bench -p capsule-actors --bench
//! tokens`. Only its split pattern is built at run time, once per process; [`warm_up`] does that
//! at launch instead of in the first call.

use capsule_protocol::neutral::{DriverRequest, Message};
use serde::Serialize;

/// Tokens added per message for the seam (`,` between messages) that per-message counting
/// cannot see; makes the estimate lean high rather than low.
pub const SEAM_TOKENS: u64 = 1;
/// Relative tolerance of [`TokenCounter::estimate`] against counting the whole payload.
pub const TOLERANCE_PERCENT: u64 = 2;
/// Absolute slack added to the relative tolerance (small payloads).
pub const TOLERANCE_TOKENS: u64 = 4;

/// The cl100k count of `text` (no special tokens: a payload is data).
pub fn count(text: &str) -> u64 {
    super::cl100k::count(text)
}

/// The cl100k count of a value's JSON form (0 if it cannot be serialized).
pub fn count_json<T: Serialize + ?Sized>(value: &T) -> u64 {
    json_len_and_count(value).1
}

fn json_len_and_count<T: Serialize + ?Sized>(value: &T) -> (u64, u64) {
    serde_json::to_string(value).map(|s| (s.len() as u64, count(&s))).unwrap_or((0, 0))
}

/// Build the split pattern now rather than in the first driver call.
pub fn warm_up() {
    super::cl100k::warm_up();
}

/// Incremental cl100k counting of a growing conversation (see the module docs).
#[derive(Debug, Default, Clone)]
pub struct TokenCounter {
    /// `prefix[i]` = tokens of the first `i` messages (seams included); `prefix[0] = 0`.
    prefix: Vec<u64>,
    /// The last envelope seen, serialized, and its count.
    envelope: Vec<u8>,
    envelope_tokens: u64,
    scratch: Vec<u8>,
    /// Envelope recounts so far (for tests and diagnostics).
    envelope_counts: u64,
    /// Bytes handed to the encoder so far (the work done).
    counted_bytes: u64,
}

impl TokenCounter {
    /// An empty counter.
    pub fn new() -> Self {
        TokenCounter { prefix: vec![0], ..Default::default() }
    }

    /// Count a message entering the context; returns its tokens (seam included).
    pub fn push(&mut self, message: &Message) -> u64 {
        let (bytes, tokens) = json_len_and_count(message);
        self.push_counted(bytes, tokens)
    }

    /// As [`TokenCounter::push`], for a message already serialized (its JSON form).
    pub fn push_json(&mut self, json: &str) -> u64 {
        self.push_counted(json.len() as u64, count(json))
    }

    fn push_counted(&mut self, bytes: u64, tokens: u64) -> u64 {
        let tokens = tokens + SEAM_TOKENS;
        self.counted_bytes += bytes;
        let last = self.prefix.last().copied().unwrap_or(0);
        if self.prefix.is_empty() {
            self.prefix.push(0);
        }
        self.prefix.push(last + tokens);
        tokens
    }

    /// Messages counted so far.
    pub fn len(&self) -> usize {
        self.prefix.len().saturating_sub(1)
    }

    /// Whether no message was counted.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Forget messages from position `len` on (the history was cut, e.g. by compaction).
    pub fn truncate(&mut self, len: usize) {
        self.prefix.truncate(len + 1);
        if self.prefix.is_empty() {
            self.prefix.push(0);
        }
    }

    /// Tokens of the counted messages from position `from` to the end.
    pub fn messages_since(&self, from: usize) -> u64 {
        let total = self.prefix.last().copied().unwrap_or(0);
        total - self.prefix.get(from).copied().unwrap_or(total)
    }

    /// How many times the fixed part was (re)counted.
    pub fn envelope_counts(&self) -> u64 {
        self.envelope_counts
    }

    /// Bytes handed to the encoder so far: the work done, which grows by a turn's new content
    /// only.
    pub fn counted_bytes(&self) -> u64 {
        self.counted_bytes
    }

    /// The estimate for `request`: the fixed part (recounted only when it changed) plus its
    /// messages, which are taken to be the last `request.messages.len()` counted ones (the whole
    /// history, or its tail after a continuation id). Messages beyond what was counted are
    /// counted now, uncached, so the estimate is never short.
    pub fn estimate(&mut self, request: &DriverRequest) -> u64 {
        let sent = request.messages.len();
        let counted = self.len();
        if sent <= counted {
            return self.estimate_envelope(request, sent);
        }
        let uncounted = &request.messages[..sent - counted];
        let fresh: u64 = uncounted
            .iter()
            .map(|m| {
                let (bytes, tokens) = json_len_and_count(m);
                self.counted_bytes += bytes;
                tokens + SEAM_TOKENS
            })
            .sum();
        fresh + self.estimate_envelope(request, counted)
    }

    /// The estimate for `request`'s fixed part (its `messages` are not looked at) sending the
    /// last `sent` counted messages (at most all of them).
    pub fn estimate_envelope(&mut self, request: &DriverRequest, sent: usize) -> u64 {
        // The request without its messages (`"messages":[]`), so that its count plus the
        // messages' counts approximates the whole.
        let env = crate::wire::RequestFields::of(request, [(); 0]);
        let mut scratch = std::mem::take(&mut self.scratch);
        scratch.clear();
        let serialized = serde_json::to_writer(&mut scratch, &env).is_ok();
        let estimate = if serialized {
            self.estimate_serialized(&String::from_utf8_lossy(&scratch), sent)
        } else {
            self.with_counted_fields(sent)
        };
        self.scratch = scratch;
        estimate
    }

    /// [`TokenCounter::estimate_envelope`] with the fields already serialized
    /// (`"messages":[]`, as [`crate::wire::Envelope::text`] holds them): counted again only
    /// when they differ from the last fields counted.
    pub fn estimate_serialized(&mut self, envelope: &str, sent: usize) -> u64 {
        if envelope.as_bytes() != self.envelope.as_slice() {
            self.envelope_tokens = count(envelope);
            self.counted_bytes += envelope.len() as u64;
            self.envelope.clear();
            self.envelope.extend_from_slice(envelope.as_bytes());
            self.envelope_counts += 1;
        }
        self.with_counted_fields(sent)
    }

    /// The last counted fields plus the last `sent` counted messages.
    fn with_counted_fields(&self, sent: usize) -> u64 {
        let counted = self.len();
        self.envelope_tokens + self.messages_since(counted - sent.min(counted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use capsule_protocol::neutral::{Block, Role, ToolSpec};
    use serde_json::json;

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn text(&mut self, words: usize) -> String {
            const W: &[&str] = &[
                "the",
                "agent",
                "reads",
                "file",
                "src/main.rs",
                "and",
                "fn",
                "main()",
                "{",
                "}",
                "42",
                "token",
                "naïve",
                "日本語",
                "\n",
                "  ",
                "println!(\"{x}\");",
                "spend",
                "ceiling",
                "—",
                "it's",
                "UTC",
            ];
            (0..words).map(|_| W[(self.next() % W.len() as u64) as usize]).collect::<Vec<_>>().join(" ")
        }
    }

    fn turn_messages(rng: &mut Rng, turn: usize) -> Vec<Message> {
        let call = Message {
            role: Role::Assistant,
            content: vec![
                Block::Text { text: rng.text(30) },
                Block::ToolCall {
                    id: format!("call_{turn}"),
                    name: "read_file".into(),
                    input: json!({"path": rng.text(2), "n": turn}),
                },
            ],
            tool_call_id: None,
            is_error: None,
            produced_by: None,
        };
        vec![call, Message::tool_result(format!("call_{turn}"), rng.text(200), turn.is_multiple_of(7))]
    }

    fn request(messages: Vec<Message>) -> DriverRequest {
        DriverRequest {
            model: "claude-sonnet-4".into(),
            max_tokens: 4096,
            system: "You are a careful coding agent.\nAnswer briefly.".into(),
            messages,
            tools: vec![ToolSpec {
                name: "read_file".into(),
                description: Some("Read a file in the scope".into()),
                parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
            }],
            params: Default::default(),
            continuation_id: None,
            prompt_cache_key: "demo:0.1.0:ctx_1".into(),
        }
    }

    #[test]
    fn the_count_equals_tiktoken_cl100k_on_mixed_text() {
        let reference = tiktoken_rs::cl100k_base_singleton();
        let mut rng = Rng(0x5eed);
        for n in [0, 1, 7, 300, 3000] {
            let text = rng.text(n);
            assert_eq!(count(&text), reference.encode_ordinary(&text).len() as u64, "text of {n} words");
        }
        let payload = serde_json::to_string(&request(turn_messages(&mut rng, 1))).unwrap_or_default();
        assert_eq!(count(&payload), reference.encode_ordinary(&payload).len() as u64);
    }

    #[test]
    fn incremental_estimate_is_within_tolerance_of_the_whole_payload_and_never_below() {
        let mut rng = Rng(42);
        let mut counter = TokenCounter::new();
        let mut history = vec![Message::user_text(rng.text(40))];
        counter.push(&history[0]);
        for turn in 1..=100 {
            let req = request(history.clone());
            let est = counter.estimate(&req);
            if turn <= 3 || turn % 10 == 0 {
                // Measured: +0.6% (+2 tokens at turn 1, +298 of 46 279 at turn 100).
                let whole = count_json(&req);
                let slack = whole * TOLERANCE_PERCENT / 100 + TOLERANCE_TOKENS;
                assert!(est >= whole, "turn {turn}: estimate {est} below the whole count {whole}");
                assert!(est - whole <= slack, "turn {turn}: estimate {est}, whole {whole}, allowed +{slack}");
            }
            for m in turn_messages(&mut rng, turn) {
                counter.push(&m);
                history.push(m);
            }
        }
        assert_eq!(counter.envelope_counts(), 1, "the fixed part is counted once");
    }

    #[test]
    fn a_continuation_tail_and_an_uncounted_history_are_both_estimated() {
        let mut rng = Rng(7);
        let mut counter = TokenCounter::new();
        let history: Vec<Message> = (1..=5).flat_map(|t| turn_messages(&mut rng, t)).collect();
        for m in &history {
            counter.push(m);
        }
        let tail = request(history[8..].to_vec());
        let env_only = counter.estimate(&request(Vec::new()));
        assert_eq!(counter.estimate(&tail), env_only + counter.messages_since(8));
        let fresh = TokenCounter::new().estimate(&request(history.clone()));
        assert_eq!(fresh, counter.estimate(&request(history)));
        counter.truncate(2);
        assert_eq!(counter.len(), 2);
    }

    #[test]
    fn counting_turn_100_feeds_the_encoder_what_turn_1_does() {
        // The work of a turn is the bytes handed to the encoder; the bench times it.
        let mut rng = Rng(99);
        let same_turn = turn_messages(&mut rng, 1);
        let fed_at = |at: usize, rng: &mut Rng| {
            let mut counter = TokenCounter::new();
            let mut history = Vec::new();
            for t in 1..at {
                for m in turn_messages(rng, t) {
                    counter.push(&m);
                    history.push(m);
                }
            }
            counter.estimate(&request(history.clone()));
            let before = counter.counted_bytes();
            history.extend(same_turn.iter().cloned());
            for m in &same_turn {
                counter.push(m);
            }
            counter.estimate(&request(history));
            counter.counted_bytes() - before
        };
        let (first, fiftieth, hundredth) = (fed_at(1, &mut rng), fed_at(50, &mut rng), fed_at(100, &mut rng));
        let turn_bytes: u64 =
            same_turn.iter().map(|m| serde_json::to_vec(m).map(|v| v.len() as u64).unwrap_or(0)).sum();
        assert_eq!((first, fiftieth, hundredth), (turn_bytes, turn_bytes, turn_bytes));
    }
}
