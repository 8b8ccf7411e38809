//! The session's actors the loop tells, by role. Each is still found by its registry name when
//! it is asked, so a restarted one is reached; the names the loop uses on every turn are made
//! once, when the loop starts, instead of formatted per message.

use crate::names::role;
use crate::peer::Peer;

use super::LoopState;

/// The roles the loop tells on every turn.
const NAMED_ONCE: [&str; 6] =
    [role::JOURNAL, role::EMITTER, role::SPEND, role::TOOLS, role::COALESCER, role::CREDENTIALS];

/// The peers of [`NAMED_ONCE`] for a session.
pub(crate) fn named(session_id: &str) -> Vec<Peer> {
    NAMED_ONCE.iter().map(|r| Peer::of(session_id, r)).collect()
}

impl LoopState {
    pub(crate) fn sid(&self) -> &str {
        &self.config.session_id
    }

    /// The session's actor with `role`.
    pub(crate) fn peer(&self, role: &'static str) -> Peer {
        match self.peers.iter().find(|p| p.role() == role) {
            Some(p) => p.clone(),
            None => Peer::of(self.sid(), role),
        }
    }
}
