//! The multi-capsule host (`capsule host`): many capsule sessions in one process, each with its
//! own door, supervised so that one capsule crashing does not disturb the others.
//!
//! ```text
//! HostSupervisor (one per process)     the table every List/Start/Stop/Restart is answered from
//! └── CapsuleSlot × N (linked)         one per capsule: launches its Session and door, restarts
//!     └── CapsuleSupervisor (linked)   the session's own tree (actors/src/supervisor.rs)
//! ```
//!
//! **What a slot guarantees.** A slot learns that its session stopped because the session's
//! supervisor is linked to it: a crash loop (`E-RUN-050: crash loop in …`) or an unexpected stop
//! reaches the slot as a supervision event; so does a failed launch. The slot then restarts the
//! capsule as a new session after a backoff ([`RestartPolicy`]: 100 ms doubling, capped), until
//! restarts come faster than the policy's intensity (3 in 60 s); then the capsule is `failed`,
//! reported, and left stopped until an operator starts it again. A capsule's launches, backoff
//! and restarts run in its slot's mailbox, so they never hold up another capsule or the host.
//!
//! **What the host table guarantees.** Every slot sends its entry to the host on each change,
//! before it answers the request that caused the change, so a `List` sent after an answer sees
//! that answer's state.
//!
//! **Deliberately not here.** A restart starts a new session (new id, empty conversation); the
//! crashed session's folder stays as it was left (its trace has no `session_end`, since its
//! journal died with it). Manual starts and restarts reset the intensity window but are not
//! counted in `restarts`.

pub mod api;
pub mod api_sessions;
pub mod claimer;
pub mod handle;
pub mod placement;
pub mod policy;
pub mod slot;
pub mod supervisor;

use capsule_protocol::host_config::HostConfig;
use serde::Serialize;
use std::collections::HashMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::Arc;

pub use handle::HostHandle;
pub use policy::RestartPolicy;
pub use supervisor::{HostArgs, HostMsg, HostSupervisor};

/// What every capsule of a host launches with: one sandbox host (engine + component cache), one
/// environment snapshot, one host config, one machine spend meter.
#[derive(Clone)]
pub struct Shared {
    /// The sandbox host, shared by every session.
    pub host: capsule_runtime::Host,
    /// The environment snapshot.
    pub env: HashMap<String, String>,
    /// The host config and its file.
    pub host_config: Option<(HostConfig, PathBuf)>,
    /// The host-wide spend meter.
    pub machine: Option<ractor::ActorRef<crate::spend::machine::MachineMsg>>,
    /// The address doors listen on.
    pub bind: IpAddr,
    /// TLS for every door (required when `bind` is not loopback).
    pub tls: Option<tokio_rustls::TlsAcceptor>,
    /// The cluster this host joined: its sessions are leased and journaled there.
    pub cluster: Option<crate::cluster::ClusterHost>,
    /// Where each capsule's session runs (`crate::shards`); `None`: on the runtime the host's
    /// actors run on.
    pub shards: Option<Arc<crate::shards::Shards>>,
}

/// A session this host claimed from a lost host and resumed, and the shard it runs on (`None`
/// when the host has no shards).
pub struct Adopted {
    /// The resumed session.
    pub session: Arc<crate::session::Session>,
    /// Its place, counted until the slot that takes it drops the session.
    pub placement: Option<crate::shards::Placement>,
}

/// Where a capsule is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CapsuleState {
    /// Launching its session and door.
    Starting,
    /// Serving its door.
    Running,
    /// Stopped by an operator or by the host's shutdown.
    Stopped,
    /// Its session stopped or failed to launch; a restart is scheduled.
    Crashed,
    /// It crashed more often than the restart policy allows; not restarted until started again.
    Failed,
}

/// One capsule as the host API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, serde::Deserialize)]
pub struct CapsuleEntry {
    /// The capsule's name in the host.
    pub name: String,
    /// Its state.
    pub state: CapsuleState,
    /// The running (or last) session's id.
    pub session_id: Option<String>,
    /// How many times the host restarted it after a crash.
    pub restarts: u32,
    /// The door's URL while running.
    pub url: Option<String>,
    /// The last error (launch refusal, crash loop, …), with its code.
    pub error: Option<String>,
}

/// What an operator can do to a capsule.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Launch it unless it is starting or running.
    Start,
    /// Shut its session down gracefully (running tasks end `canceled`, `session_end` written).
    Stop,
    /// Stop (when running), then launch a new session.
    Restart,
}

impl Action {
    /// Parse the last path segment of `POST /capsules/<name>/<action>`.
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "start" => Some(Action::Start),
            "stop" => Some(Action::Stop),
            "restart" => Some(Action::Restart),
            _ => None,
        }
    }
}

/// Why a host request was refused. The display form is `<reason>: <sentence>`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// No capsule has that name.
    #[error("unknown_capsule: no capsule named `{0}` runs in this host; GET /capsules lists them")]
    UnknownCapsule(String),
    /// Not start, stop or restart.
    #[error("unknown_action: `{0}` is not an action; use start, stop or restart")]
    UnknownAction(String),
    /// The host is shutting down.
    #[error("shutting_down: the host is shutting down and starts nothing more")]
    ShuttingDown,
    /// The host or the capsule's slot did not answer.
    #[error("unavailable: the host did not answer in time; try again")]
    Unavailable,
}

impl HostError {
    /// The HTTP status of the refusal.
    pub fn status(&self) -> u16 {
        match self {
            HostError::UnknownCapsule(_) | HostError::UnknownAction(_) => 404,
            HostError::ShuttingDown | HostError::Unavailable => 503,
        }
    }
}

/// An error and its causes, one per `: ` (a cause already in the text is not repeated).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}
