//! A session's waits for its provider, told by its gateways and heard by its tools actor.
//!
//! A tool call follows the provider's answer, and while the provider answers the runtime's
//! worker has nothing to do. A gateway says when its call's request is out (a wait begins) and
//! when an answer asks for no tools (no tool call follows it); a tool's next instance is made
//! in the wait ([`crate::ToolAhead`]) and held only until the next of these.

use std::sync::Arc;
use tokio::sync::watch;

/// One session's waits for its provider. Cloned into each of its gateways and its tools actor;
/// every clone is the same.
#[derive(Clone, Debug)]
pub struct Waits(Arc<watch::Sender<Wait>>);

/// The latest news: how many there have been, and whether it was a request going out.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Wait {
    pub(crate) seq: u64,
    pub(crate) out: bool,
}

impl Default for Waits {
    fn default() -> Waits {
        Waits(Arc::new(watch::Sender::new(Wait::default())))
    }
}

impl Waits {
    /// A driver call's request is out: the provider is answering. (A driver's [`crate::Ahead`]
    /// made with [`crate::Ahead::telling`] says so itself.)
    pub fn out(&self) {
        self.tell(true);
    }

    /// An answer came that asks for no tools (or the call failed): no tool call follows it, so
    /// nothing made for one should be held.
    pub fn answered_without_tools(&self) {
        self.tell(false);
    }

    fn tell(&self, out: bool) {
        self.0.send_modify(|w| {
            w.seq += 1;
            w.out = out;
        });
    }

    /// A receiver that sees only what is told from now on.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Wait> {
        self.0.subscribe()
    }
}
