//! Where a guest's live events go. The runtime calls these from inside a component call; they
//! must return at once and never fail (CONTRACT §2), so implementations forward without
//! waiting (a channel send or an actor cast). `request-input` is the exception: it returns a
//! future the guest waits on, and that wait is kept off the call's deadline ([`Paused`]).

use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Time a call spent waiting on the host (a person's answer, a hook's inference, its send
/// gate), kept off its deadline. Waits may overlap (two requests held at one gate): the time
/// counted is when at least one wait is in progress.
#[derive(Debug, Default)]
pub struct Paused {
    inner: Mutex<Waits>,
}

#[derive(Debug, Default)]
struct Waits {
    /// Ended stretches of waiting.
    total: Duration,
    /// Since when at least one wait is in progress.
    since: Option<Instant>,
    /// Waits in progress.
    open: u32,
}

impl Paused {
    /// A wait begins.
    pub fn start(&self) {
        if let Ok(mut g) = self.inner.lock() {
            if g.open == 0 {
                g.since = Some(Instant::now());
            }
            g.open += 1;
        }
    }

    /// A wait ended.
    pub fn stop(&self) {
        if let Ok(mut g) = self.inner.lock() {
            g.open = g.open.saturating_sub(1);
            if g.open == 0
                && let Some(since) = g.since.take()
            {
                g.total += since.elapsed();
            }
        }
    }

    /// All time waited so far, the wait in progress included.
    pub fn total(&self) -> Duration {
        self.inner.lock().map(|g| g.total + g.since.map_or(Duration::ZERO, |s| s.elapsed())).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn overlapping_waits_count_once_and_end_with_the_last() {
        let p = Paused::default();
        p.start();
        p.start();
        p.stop();
        let during = p.total();
        assert!(p.inner.lock().expect("lock").since.is_some(), "one wait is still in progress");
        let deadline = Instant::now() + Duration::from_secs(5);
        while p.total() == during {
            assert!(Instant::now() < deadline, "the open wait keeps counting");
        }
        p.stop();
        let ended = p.total();
        assert!(p.inner.lock().expect("lock").since.is_none(), "every wait ended");
        assert_eq!(p.total(), ended, "nothing counts once every wait ended");
        p.stop();
        assert_eq!(p.total(), ended, "an extra stop changes nothing");
    }
}

/// The answer to a guest's `request-input`, which the guest awaits.
pub type InputAnswer = std::pin::Pin<Box<dyn std::future::Future<Output = String> + Send>>;

/// One `run-inference` request from a hook.
#[derive(Debug, Clone, PartialEq)]
pub struct InferenceAsk {
    /// `(role, content)` pairs, as the hook wrote them.
    pub messages: Vec<(String, String)>,
    /// The system prompt (`None`: none).
    pub system_prompt: Option<String>,
    /// The model (`None`: the primary choice's).
    pub model: Option<String>,
}

/// What `run-inference` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InferenceReplyText {
    /// The reply's text.
    pub text: String,
    /// The model the request named.
    pub model_used: String,
    /// cl100k count of the request.
    pub input_tokens: u64,
    /// cl100k count of the reply.
    pub output_tokens: u64,
}

/// The answer to a hook's `run-inference`, which the hook awaits.
pub type InferenceAnswer =
    std::pin::Pin<Box<dyn std::future::Future<Output = Result<InferenceReplyText, String>> + Send>>;

/// Receiver of `murmur:stream/events` and `murmur:text/chunks` calls, and of `request-input`.
pub trait GuestEvents: Send + Sync {
    /// `emit-chunk`.
    fn chunk(&self, text: String);
    /// `emit-thinking-chunk`.
    fn thinking(&self, text: String);
    /// `tool-call-started` (drivers only; the runtime drops it for tools).
    fn tool_call_started(&self, id: String, name: String);
    /// `tool-call-input-bytes`, cumulative (drivers only).
    fn tool_call_input_bytes(&self, id: String, bytes: u64);
    /// `request-input` from a tool: the answer, or an error string when no one can be asked.
    /// The only call here that may wait: the time until it resolves does not count toward the
    /// call's deadline.
    fn request_input(&self, prompt: String) -> InputAnswer {
        let _ = prompt;
        Box::pin(std::future::ready("error: this session cannot ask a person for input".to_string()))
    }
    /// `run-inference` from a hook: one completion through the primary driver choice. It may
    /// wait; the wait does not count toward the hook's deadline.
    fn run_inference(&self, ask: InferenceAsk) -> InferenceAnswer {
        let _ = ask;
        Box::pin(std::future::ready(Err("run-inference is available to hooks only".to_string())))
    }
}

/// Drops every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoEvents;

impl GuestEvents for NoEvents {
    fn chunk(&self, _: String) {}
    fn thinking(&self, _: String) {}
    fn tool_call_started(&self, _: String, _: String) {}
    fn tool_call_input_bytes(&self, _: String, _: u64) {}
}
