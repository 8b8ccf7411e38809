//! A tool's next instance, made while the session's provider answers.
//!
//! A tool call comes after the provider's answer, and in the provider's wait the runtime's
//! worker has nothing to do. So after each call of a tool (and at the session's start, for
//! each tool), a task waits for the session's next wait ([`Waits`]: a driver call's request
//! is out), then drops the store the tool's last call used and makes a store and instance for
//! its next call. The next call takes it when it is ready and fits; otherwise it makes its
//! own, as every call did.
//!
//! Guarantees, besides those of [`crate::ahead`] (no guest code has run in an instance made
//! ahead, it serves one call at most, and it counts against [`MAX_HELD`](crate::MAX_HELD)):
//! - the tool's folder is found in the wait (without creating it) and its WASI context made
//!   with it; the call resolves the scope again, on the call's thread, before any guest code
//!   runs, and keeps that context only when the folder it holds is the one the scope's path
//!   resolves to now (the same device and inode; its descriptor was open all along, so the
//!   inode cannot have been reused). Otherwise the context is built at the call with the
//!   folder just resolved: a folder swapped for a symlink between the making and the call
//!   refuses the call, and one replaced by another folder gives the call the new one, as
//!   for a store made at the call; an instance made with a folder never serves a call
//!   without one;
//! - a call waits for a make only once a wait has begun (the make is then under way or done:
//!   the work the call would otherwise do itself); with no wait since the tool's last call (a
//!   turn's second call of a tool) the make is abandoned and the call makes its own;
//! - an instance not taken is dropped at the session's next news (the next request out, or an
//!   answer that asks for no tools), so an idle session holds none.

use std::sync::{Arc, Mutex};
use tokio::sync::{oneshot, watch};
use wasmtime::Store;

use crate::ahead::{Counted, ForCall, Made};
use crate::call::{CallOutcome, ToolInput};
use crate::engine::Host;
use crate::events::GuestEvents;
use crate::grants::Grants;
use crate::load::{ComponentKind, LoadedArtifact};
use crate::state::StoreState;
use crate::waits::{Wait, Waits};

/// Where a tool's instance made ahead is put when it is ready.
type Slot = Arc<Mutex<Option<Made>>>;

/// One tool's next instance (the tools actor keeps one per tool).
#[derive(Default)]
pub struct ToolAhead {
    next: Option<Next>,
}

/// The work started after a call: the session's news since then, where the instance goes, and
/// the make's end (sent, or dropped unsent, once it has put its instance in or given up).
struct Next {
    news: watch::Receiver<Wait>,
    slot: Slot,
    tried: oneshot::Receiver<()>,
}

impl std::fmt::Debug for ToolAhead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolAhead").field("started", &self.next.is_some()).finish()
    }
}

impl ToolAhead {
    /// A [`ToolAhead`] for `artifact`'s first call: its instance is made in the session's
    /// first wait.
    pub fn first(artifact: &LoadedArtifact, host: &Host, grants: &Grants, waits: &Waits) -> ToolAhead {
        let mut ahead = ToolAhead::default();
        if artifact.kind() == ComponentKind::Run {
            ahead.start(artifact, host, grants, waits, None);
        }
        ahead
    }

    /// Whether an instance is made and waiting for the next call.
    pub fn is_ready(&self) -> bool {
        self.next.as_ref().is_some_and(|n| n.slot.lock().unwrap_or_else(|p| p.into_inner()).is_some())
    }

    /// The instance made for a call with `grants`, if a wait has begun since the tool's last
    /// call (then its make is waited for) and it fits; the call's policy and `events` go in.
    /// Either way the work is given up: an instance still to be made is then not made.
    async fn take(&mut self, grants: &Grants, events: Arc<dyn GuestEvents>) -> Option<Made> {
        let Next { news, slot, tried } = self.next.take()?;
        if !news.has_changed().unwrap_or(false) {
            return None;
        }
        let _ = tried.await;
        let made = slot.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        made.fit(grants, events)
    }

    /// After a call of `artifact` with `grants` that used `used`: at the session's next wait,
    /// drop `used` and make the next instance. Nothing outside a tokio runtime.
    pub(crate) fn start(
        &mut self,
        artifact: &LoadedArtifact,
        host: &Host,
        grants: &Grants,
        waits: &Waits,
        used: Option<Store<StoreState>>,
    ) {
        // Told from now on: a wait that begins after this call is the one to use.
        let mut news = waits.subscribe();
        let Ok(runtime) = tokio::runtime::Handle::try_current() else { return };
        // The used store waits only when the cap allows; otherwise it is dropped now.
        let used = used.and_then(|store| Counted::take().map(|counted| (store, counted)));
        let slot = Slot::default();
        let (tried_tx, tried) = oneshot::channel();
        self.next = Some(Next { news: news.clone(), slot: slot.clone(), tried });
        let (artifact, host, grants) = (artifact.clone(), host.clone(), grants.clone());
        runtime.spawn(async move {
            let waiting = news.changed().await.is_ok() && news.borrow_and_update().out;
            // The used store's count goes to the instance made in its place.
            let counted = used.map(|(store, counted)| {
                drop(store);
                counted
            });
            // Not in a wait, or the call it was for has already come and made its own.
            if !waiting || Arc::strong_count(&slot) == 1 {
                return;
            }
            let Some(counted) = counted.or_else(Counted::take) else { return };
            // The folder as it is now, found without creating anything (a folder still missing
            // is made by the call); the call checks it is still the folder at the scope's path.
            let folder = grants.folder().and_then(|s| s.find().ok());
            let Some(made) = Made::make(&artifact, &host, grants, counted, folder).await else { return };
            *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(made);
            drop(tried_tx);
            // Held until the next news; what no call took by then is dropped.
            let _ = news.changed().await;
            drop(slot.lock().unwrap_or_else(|p| p.into_inner()).take());
        });
    }
}

impl LoadedArtifact {
    /// [`LoadedArtifact::call`] for a tools actor that keeps a [`ToolAhead`] per tool (see
    /// [`crate::tool_ahead`]): the call runs in the instance made for it in the provider's
    /// wait when there is one ready, and the next is made in the session's next wait. A hook
    /// is called as by [`LoadedArtifact::call`].
    pub async fn call_tool_ahead(
        &self,
        host: &Host,
        grants: &Grants,
        events: Arc<dyn GuestEvents>,
        input: ToolInput,
        ahead: &mut ToolAhead,
        waits: &Waits,
    ) -> CallOutcome {
        if self.kind() != ComponentKind::Run {
            return self.call(host, grants, events, input).await;
        }
        let made = ahead.take(grants, events.clone()).await;
        let (outcome, used) = if grants.has_folder() {
            self.on_own_thread(host, grants, events, input, made, true).await
        } else {
            let ahead = ForCall { made, sent: None };
            Box::pin(self.call_here(host, grants, events, input, false, ahead)).await
        };
        ahead.start(self, host, grants, waits, used);
        outcome
    }
}
