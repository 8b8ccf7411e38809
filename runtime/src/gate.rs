//! A driver call's send gate: the call may start, and its guest may build its request, while
//! the step before it is still being journaled; no request of the call leaves the host until
//! that step's journal write is acknowledged (write before act).
//!
//! The caller holds the [`GateOpener`] and opens it once the write is acknowledged, or refuses
//! it when the write failed. Dropping the opener refuses it. Every outgoing request of a store
//! whose gateway route carries a [`SendGate`] waits on it; a refused gate fails the request
//! with nothing sent. The wait is the host's time, not the guest's: it does not count against
//! the guest's deadline.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::watch;

/// The waiting side, cloned into each call's outgoing policy.
#[derive(Debug, Clone)]
pub struct SendGate {
    decided: watch::Receiver<Option<bool>>,
    waiting: Arc<AtomicUsize>,
}

/// The opening side, held by whoever waits for the journal.
#[derive(Debug)]
pub struct GateOpener {
    decide: watch::Sender<Option<bool>>,
    waiting: Arc<AtomicUsize>,
}

/// A closed gate and its opener.
pub fn send_gate() -> (GateOpener, SendGate) {
    let (decide, decided) = watch::channel(None);
    let waiting = Arc::new(AtomicUsize::new(0));
    (GateOpener { decide, waiting: waiting.clone() }, SendGate { decided, waiting })
}

impl GateOpener {
    /// The step is journaled: requests may go.
    pub fn open(self) {
        self.decide.send_replace(Some(true));
    }

    /// The step is not journaled: every request waiting or to come fails.
    pub fn refuse(self) {
        self.decide.send_replace(Some(false));
    }

    /// Requests held at the gate right now.
    pub fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}

impl SendGate {
    /// A gate that is already open (a call with nothing to wait for).
    pub fn opened() -> SendGate {
        let (opener, gate) = send_gate();
        opener.open();
        gate
    }

    /// Wait until the gate is decided: `true` when opened, `false` when refused or when its
    /// opener was dropped undecided.
    pub async fn passed(&mut self) -> bool {
        if let Some(decided) = *self.decided.borrow() {
            return decided;
        }
        self.waiting.fetch_add(1, Ordering::AcqRel);
        let waited = self.decided.wait_for(Option::is_some).await.map(|v| *v == Some(true));
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        // Closed undecided (the opener dropped): refused, unless it decided just before.
        waited.unwrap_or_else(|_closed| *self.decided.borrow() == Some(true))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_gate_passes_only_once_opened_and_never_when_refused_or_abandoned() {
        let (opener, mut gate) = send_gate();
        let mut early = gate.clone();
        let waiting = tokio::spawn(async move { early.passed().await });
        while opener.waiting() == 0 {
            tokio::task::yield_now().await;
        }
        assert!(!waiting.is_finished(), "an undecided gate holds its waiters");
        opener.open();
        assert!(waiting.await.expect("joined"));
        assert!(gate.passed().await, "a late waiter passes an opened gate");

        let (opener, mut gate) = send_gate();
        opener.refuse();
        assert!(!gate.passed().await);

        let (opener, mut gate) = send_gate();
        drop(opener);
        assert!(!gate.passed().await, "a dropped opener refuses");
        assert!(SendGate::opened().passed().await);
    }
}
