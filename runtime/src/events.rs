//! Where a guest's live events go. The runtime calls these from inside a component call; they
//! must return at once and never fail (CONTRACT §2), so implementations forward without
//! waiting (a channel send or an actor cast).

/// Receiver of `murmur:stream/events` and `murmur:text/chunks` calls.
pub trait GuestEvents: Send + Sync {
    /// `emit-chunk`.
    fn chunk(&self, text: String);
    /// `emit-thinking-chunk`.
    fn thinking(&self, text: String);
    /// `tool-call-started` (drivers only; the runtime drops it for tools).
    fn tool_call_started(&self, id: String, name: String);
    /// `tool-call-input-bytes`, cumulative (drivers only).
    fn tool_call_input_bytes(&self, id: String, bytes: u64);
    /// `request-input` from a tool; the answer, or an error string when unsupported.
    fn request_input(&self, prompt: String) -> String {
        let _ = prompt;
        "error: this session cannot ask a person for input".to_string()
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
