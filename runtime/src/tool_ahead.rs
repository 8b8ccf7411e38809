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
//! - a call waits for a make only when the latest news is a wait begun since the tool's last
//!   call (the make is then under way or done: the work the call would otherwise do itself);
//!   with no wait since (a turn's second call of a tool), or an answer without tools after the
//!   last one, the make is abandoned and the call makes its own;
//! - an instance not taken is dropped at the session's next news (the next request out, or an
//!   answer that asks for no tools), so an idle session holds none;
//! - when that news is an answer that asks for no tools (a task's last answer, or a failed
//!   call), the instance is made once more in the wait after it: the next task's first tool
//!   call then finds one, as the session's first did. One made then and not taken is the last
//!   until the tool's next call.

use std::sync::{Arc, Mutex};
use tokio::sync::watch;
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
/// the number of the last news the work has dealt with (for a wait: once its instance is made;
/// the sender is dropped when no more is to come).
struct Next {
    news: watch::Receiver<Wait>,
    slot: Slot,
    tried: watch::Receiver<u64>,
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

    /// The instance made for a call with `grants`, if the latest news is a wait begun since the
    /// tool's last call (then its make is waited for) and it fits; the call's policy and
    /// `events` go in. Either way the work is given up: an instance still to be made is then
    /// not made.
    async fn take(&mut self, grants: &Grants, events: Arc<dyn GuestEvents>) -> Option<Made> {
        let Next { news, slot, mut tried } = self.next.take()?;
        if !news.has_changed().unwrap_or(false) {
            return None;
        }
        let latest = *news.borrow();
        if !latest.out {
            // An answer that asked for no tools came last: what was held is gone, and the make
            // for the next wait has not begun.
            return None;
        }
        let _ = tried.wait_for(|&seq| seq >= latest.seq).await;
        let made = slot.lock().unwrap_or_else(|p| p.into_inner()).take()?;
        made.fit(grants, events)
    }

    /// After a call of `artifact` with `grants` that used `used`: at the session's next wait,
    /// drop `used` and make the next instance, held until the news after that. When that news
    /// is an answer that asked for no tools (the task's turns ended, or its call failed), the
    /// instance is made once more in the wait after it, the next task's first; one made then
    /// and not taken is the last. Nothing outside a tokio runtime.
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
        let mut used = used.and_then(|store| Counted::take().map(|counted| (store, counted)));
        let slot = Slot::default();
        let (tried_tx, tried) = watch::channel(0);
        self.next = Some(Next { news: news.clone(), slot: slot.clone(), tried });
        let (artifact, host, grants) = (artifact.clone(), host.clone(), grants.clone());
        runtime.spawn(async move {
            // Whether the instance about to be made is the one made again after an answer
            // without tools.
            let mut again = false;
            loop {
                if news.changed().await.is_err() {
                    return;
                }
                let wait = *news.borrow_and_update();
                // The used store's count goes to the instance made in its place.
                let counted = used.take().map(|(store, counted)| {
                    drop(store);
                    counted
                });
                // The call it was for has already come and made its own.
                if Arc::strong_count(&slot) == 1 {
                    return;
                }
                if !wait.out {
                    // No tool call follows this answer: make the instance in the next wait.
                    again = true;
                    tried_tx.send_replace(wait.seq);
                    continue;
                }
                // The folder as it is now, found without creating anything (a folder still
                // missing is made by the call); the call checks it is still the folder at the
                // scope's path.
                let Some(counted) = counted.or_else(Counted::take) else { return };
                let folder = grants.folder().and_then(|s| s.find().ok());
                let Some(made) = Made::make(&artifact, &host, grants.clone(), counted, folder).await else { return };
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some(made);
                tried_tx.send_replace(wait.seq);
                // Held until the next news; what no call took by then is dropped.
                if news.changed().await.is_err() {
                    return;
                }
                let after = *news.borrow_and_update();
                drop(slot.lock().unwrap_or_else(|p| p.into_inner()).take());
                tried_tx.send_replace(after.seq);
                // Made again only once, and only when the news was an answer without tools: a
                // wait means the turn's tool calls went by without this tool.
                if again || after.out {
                    return;
                }
                again = true;
            }
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
