//! The supervision tree of a capsule session (DESIGN.md) built with ractor.
//!
//! ```text
//! CapsuleSupervisor (one per session)
//! ├── Journal        trace.jsonl + conversation record, written before acknowledged
//! ├── Emitter        frame ids, replay ring, subscribers
//! ├── Coalescer      tool-call-started / tool-call-progress rules
//! ├── Credentials    resolves credentials; the one place keys live besides egress
//! ├── SpendMeter     counts tokens per session
//! ├── Gateway × N    one per driver artifact: runs driver calls
//! ├── Tools          runs tool calls
//! ├── Hook × N       one per hook artifact: its one live instance
//! └── AgentLoop      owns the conversation and the running task
//! ```
//!
//! Every child is registered under `<session id>/<role>` so a restarted child is found by the
//! same name; see [`names`]. [`Session`] is the handle a CLI or a door uses.

// The actors, one file (or folder) each with its messages beside it. Private: a user reaches
// them through a [`Session`] and the re-exports below.
mod agent_loop;
mod artifact_source;
mod choices;
mod credentials;
mod gateway;
mod journal;
mod journal_check;
mod journal_log;
mod lease_keeper;
mod session_resume;
mod session_start;
mod session_tokens;
mod sink;
mod supervisor;
mod tools;
pub mod wire;

// Parts a caller uses as modules of their own.
pub mod a2a;
pub mod cluster;
pub mod coalescer;
pub mod control;
pub mod door;
pub mod emitter;
pub mod error;
pub mod hook;
mod hook_inference;
pub mod hook_messages;
pub mod host;
pub mod launch;
pub mod listener;
pub mod local_origin;
pub mod names;
pub mod otel;
pub mod package;
pub mod peer;
pub mod session;
pub mod shards;
pub mod spend;
pub mod timer_floor;
pub mod tls;
pub mod workers;

/// A session and launching it.
pub use error::{InferenceError, JournalError, LaunchError};
pub use launch::{EndpointOverride, FILES_DIR, LaunchOptions, Prepared, prepare};
pub use session::{Session, SessionError};

/// Tasks as a submitter and `tasks/get` see them.
pub use agent_loop::{InputRefusal, Origin, TaskOutcome, TaskRecord};

/// Resuming a stopped session.
pub use agent_loop::{INTERRUPTED, ResumeSeed, read_conversation};
pub use journal_check::JOURNAL_FILES;

/// Supervision limits and test hooks a caller may drive.
pub use gateway::GatewayMsg;
pub use supervisor::{MAX_RESTARTS, RESTART_PERIOD};

/// Milliseconds since the UNIX epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
