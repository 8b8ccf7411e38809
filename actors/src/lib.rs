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
//! └── AgentLoop      owns the conversation and the running task
//! ```
//!
//! Every child is registered under `<session id>/<role>` so a restarted child is found by the
//! same name; see [`names`]. [`Session`] is the handle a CLI or a door uses.

pub mod agent_loop;
pub mod choices;
pub mod coalescer;
pub mod control;
pub mod credentials;
pub mod door;
pub mod emitter;
pub mod error;
pub mod gateway;
pub mod host;
pub mod journal;
pub mod journal_check;
pub mod launch;
pub mod listener;
pub mod local_origin;
pub mod machine_meter;
pub mod names;
pub mod peer;
pub mod session;
mod session_resume;
pub mod sink;
pub mod spend;
pub mod supervisor;
pub mod tokens;
pub mod tools;

pub use error::LaunchError;
pub use launch::{EndpointOverride, LaunchOptions};
pub use session::{Session, TaskOutcome};

/// Milliseconds since the UNIX epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}
