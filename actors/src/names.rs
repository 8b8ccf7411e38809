//! Registry names of a session's actors. Names are global to the process, so each carries the
//! session id; a restarted child re-registers under the same name, so senders that look it up
//! by name reach the new one.

use ractor::{ActorRef, Message};

/// The name of a session's actor with that role.
pub fn name(session_id: &str, role: &str) -> String {
    format!("{session_id}/{role}")
}

/// The gateway of a driver artifact.
pub fn gateway(session_id: &str, artifact: &str) -> String {
    format!("{session_id}/gateway/{artifact}")
}

/// The actor of a hook artifact.
pub fn hook(session_id: &str, artifact: &str) -> String {
    format!("{session_id}/hook/{artifact}")
}

/// Look an actor up by name.
pub fn lookup<M: Message>(name: &str) -> Option<ActorRef<M>> {
    ractor::registry::where_is(name).map(ActorRef::from)
}

/// Roles.
pub mod role {
    /// The journal.
    pub const JOURNAL: &str = "journal";
    /// The emitter.
    pub const EMITTER: &str = "emitter";
    /// The coalescer.
    pub const COALESCER: &str = "coalescer";
    /// The credentials actor.
    pub const CREDENTIALS: &str = "credentials";
    /// The spend meter.
    pub const SPEND: &str = "spend";
    /// The tools actor.
    pub const TOOLS: &str = "tools";
    /// The agent loop.
    pub const LOOP: &str = "loop";
    /// The supervisor.
    pub const SUPERVISOR: &str = "supervisor";
}
