//! A scripted model provider on loopback HTTP, for tests and for `capsule demo`.
//!
//! The stub speaks two real wire formats, Anthropic Messages (`POST …/v1/messages`) and OpenAI
//! Chat Completions (`POST …/chat/completions`), streaming (SSE) and not. Each model request is
//! answered from the next [`Turn`] of a [`Script`]: text, thinking, tool calls, usage, or a
//! scripted failure (HTTP error, garbage, a cut stream, an in-stream error, a delay), with
//! streamed events optionally paced (`event_interval_ms`), or a recorded response replayed byte
//! for byte ([`RawResponse`]). Every request is recorded ([`RecordedRequest`]) and readable
//! in-process with [`StubHandle::requests`] or from another process at `GET /_stub/requests`.
//!
//! ```no_run
//! # async fn demo() -> Result<(), capsule_stub::StubError> {
//! use capsule_stub::{Script, Stub, Turn};
//! let stub = Stub::start(Script::new(vec![Turn::text("Hello!")]))?;
//! // point a driver at stub.url() ...
//! assert!(stub.requests().is_empty());
//! # Ok(()) }
//! ```
//!
//! The stub is deliberately simple: it does not validate requests (tests assert on the recorded
//! request instead), does not count tokens, and holds no conversation state.

mod anthropic;
mod body;
mod cli;
mod error;
mod openai;
mod plan;
mod raw;
mod record;
mod script;
mod server;

pub use cli::serve_cli;
pub use error::StubError;
pub use record::{Provider, RecordedRequest};
pub use script::{
    DEFAULT_CHUNK_CHARS, DEFAULT_DELTA_BYTES, HttpError, RawResponse, Script, StreamError, Thinking, ToolCall, Turn,
    Usage,
};
pub use server::{Stub, StubHandle};
