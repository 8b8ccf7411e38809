//! A driver's next instance, made while the provider answers.
//!
//! Every call gets a fresh store and instance, never a used one. Making them (about 30 µs)
//! and dropping the used store (about 17 µs: its memory slot is reset) would otherwise both
//! fall in the middle of a turn, on the worker the turn runs on. But every driver call also
//! waits for its provider, and the worker has nothing to do while the request is out. So a
//! caller that keeps an [`Ahead`] (a driver's gateway) has that work done then:
//! [`LoadedArtifact::call_ahead`] starts a task that waits until the call's request has gone
//! out whole, then drops the store the previous call used and makes a store and instance with
//! this call's grants. The next `call_ahead` takes that instance when it was made with the same
//! environment, limits and role (waiting for it if the make is still under way: the work is the
//! call's own, already started); otherwise it makes its own, as every call did.
//!
//! Guarantees:
//! - an instance made ahead has run no guest code: instantiation runs none, and it serves one
//!   call at most (taking it empties the [`Ahead`]);
//! - the call's own grants apply: the WASI environment and the limits are part of the store and
//!   must be equal, and the outgoing policy (the gateway route with its credential, the send
//!   gate, `network.allow`) and the event sink are put in when the call takes it, so an instance
//!   made ahead never holds a credential while it waits;
//! - at most [`MAX_HELD`] instances are held this way in a process at once (made ahead, or
//!   used and waiting to be dropped), so the rest of the instance pool always remains for
//!   running calls; past that, a used store is dropped at once and a call makes its own;
//! - a failure to make one (a full pool, an instantiation that fails) only means the next call
//!   makes its own and meets the same failure there, reported as it always is;
//! - a call that sends no request starts the work when it returns.
//!
//! Measured and not taken (BENCHMARKS.md, "Twentieth pass"): making the instance on a thread
//! of its own, at once or when the answer asks for tools. The call then needs no instantiation
//! of its own, but the turn was not shorter: the work still fell inside the turn.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::oneshot;
use wasmtime::Store;

use crate::beneath::{Beneath, FolderId};
use crate::bindings::ArtifactHost;
use crate::budget::CallDisk;
use crate::call::{CallOutcome, ToolInput, new_store_in};
use crate::engine::Host;
use crate::events::{GuestEvents, NoEvents};
use crate::grants::{GrantError, Grants};
use crate::load::{ComponentKind, LoadedArtifact, Pre};
use crate::state::StoreState;
use crate::waits::Waits;

/// Instances held by [`Ahead`]s in a process at once, made ahead or used and waiting to be
/// dropped (the pool holds [`POOL_INSTANCES`](crate::engine::POOL_INSTANCES)).
pub const MAX_HELD: usize = 16;

/// Instances held by [`Ahead`]s now.
static HELD: AtomicUsize = AtomicUsize::new(0);

/// One caller's next instance: the store its last call used (until the next call's request is
/// out) and the instance being made for its next call.
#[derive(Default)]
pub struct Ahead {
    used: Option<(Store<StoreState>, Counted)>,
    making: Option<oneshot::Receiver<Made>>,
    ready: Option<Made>,
    /// Told when a call's request is out (the session's tools make their next instance then).
    waits: Option<Waits>,
}

impl std::fmt::Debug for Ahead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ahead")
            .field("used", &self.used.is_some())
            .field("making", &self.making.is_some())
            .field("ready", &self.ready.is_some())
            .field("waits", &self.waits.is_some())
            .finish()
    }
}

/// A fresh store with its instance, and the grants it was made with.
pub(crate) struct Made {
    pub(crate) store: Store<StoreState>,
    pub(crate) instance: ArtifactHost,
    grants: Grants,
    /// The folder its WASI context holds (a tool's, found in the wait), and whether its file
    /// operations run inline.
    folder: Option<FolderId>,
    inline_files: bool,
    _counted: Counted,
}

/// What a call gets from its caller's [`Ahead`]: the instance made for it, and the signal its
/// first request gives (both absent for a call without one).
#[derive(Default)]
pub(crate) struct ForCall {
    pub(crate) made: Option<Made>,
    pub(crate) sent: Option<Sent>,
}

/// What a call's request gives when hyper has taken the whole of its body (or the body
/// failed): the request is out. It wakes the work of the caller's [`Ahead`] and tells the
/// session's [`Waits`] a wait has begun, there and then, before any answer can come.
/// Dropped unsent (the call sent no request), it wakes the work only.
pub(crate) struct Sent {
    done: oneshot::Sender<()>,
    waits: Option<Waits>,
}

impl Sent {
    pub(crate) fn fire(self) {
        if let Some(waits) = &self.waits {
            waits.out();
        }
        let _ = self.done.send(());
    }
}

/// One of the [`MAX_HELD`]; kept beside (after) the store it counts, so it is given back
/// once the store is dropped.
pub(crate) struct Counted;

impl Counted {
    pub(crate) fn take() -> Option<Counted> {
        HELD.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| (n < MAX_HELD).then_some(n + 1)).ok().map(|_| Counted)
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        HELD.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Instances held by [`Ahead`]s now in this process.
pub fn held() -> usize {
    HELD.load(Ordering::SeqCst)
}

impl Ahead {
    /// An [`Ahead`] that tells `waits` each time a call's request is out.
    pub fn telling(waits: Waits) -> Ahead {
        Ahead { waits: Some(waits), ..Ahead::default() }
    }

    /// Drop here what it holds: the used store and any instance made or being made (no next
    /// call is expected soon, so nothing should hold a pool slot meanwhile).
    pub fn clear(&mut self) {
        *self = Ahead { waits: self.waits.take(), ..Ahead::default() };
    }

    /// Wait until the instance being made is ready or has failed; whether one is ready.
    pub async fn settle(&mut self) -> bool {
        if let Some(making) = self.making.take() {
            self.ready = making.await.ok();
        }
        self.ready.is_some()
    }

    /// The instance made for a call with `grants`, if one was made with the same environment,
    /// limits and role; the call's policy and `events` go in. A make still under way is waited
    /// for: it is the work the call would otherwise do itself, already started. Empties the
    /// slot either way: an instance made ahead serves one call at most.
    async fn take(&mut self, grants: &Grants, events: Arc<dyn GuestEvents>) -> Option<Made> {
        self.settle().await;
        self.ready.take()?.fit(grants, events)
    }

    /// Start the work for the call about to run with `grants`: a task that waits for the
    /// returned signal (the call's request is out, or the call is over), then drops the used
    /// store and makes the next instance. `None` outside a tokio runtime (the used store is
    /// dropped here).
    fn start(&mut self, artifact: &LoadedArtifact, host: &Host, grants: &Grants) -> Option<Sent> {
        let used = self.used.take();
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (sent, when_sent) = oneshot::channel::<()>();
        let (made, making) = oneshot::channel();
        let (artifact, host, mut grants) = (artifact.clone(), host.clone(), grants.clone());
        // Nothing of the call's own is held while waiting: no credential, no gate, no sink.
        grants.policy.gateway = None;
        grants.policy.gate = None;
        runtime.spawn(async move {
            let _ = when_sent.await;
            // The used store's count goes to the instance made in its place.
            let counted = match used {
                Some((store, counted)) => {
                    drop(store);
                    Some(counted)
                }
                None => Counted::take(),
            };
            let Some(counted) = counted else { return };
            if let Some(m) = Made::make(&artifact, &host, grants, counted, None).await {
                let _ = made.send(m);
            }
        });
        self.making = Some(making);
        Some(Sent { done: sent, waits: self.waits.clone() })
    }
}

impl LoadedArtifact {
    /// [`LoadedArtifact::call`] for a caller that keeps an [`Ahead`] (see [`crate::ahead`]):
    /// the call runs in the instance made ahead for it when there is a fitting one, and while
    /// its request is out the store of the previous call is dropped and the next call's
    /// instance made. A tool with a folder (its folder is resolved at each call, on a thread of
    /// its own) is called as by [`LoadedArtifact::call`].
    pub async fn call_ahead(
        &self,
        host: &Host,
        grants: &Grants,
        events: Arc<dyn GuestEvents>,
        input: ToolInput,
        ahead: &mut Ahead,
    ) -> CallOutcome {
        if grants.has_folder() || self.kind() != ComponentKind::Run {
            ahead.clear();
            return self.call(host, grants, events, input).await;
        }
        let made = ahead.take(grants, events.clone()).await;
        let sent = ahead.start(self, host, grants);
        let (outcome, mut store) =
            Box::pin(self.call_here(host, grants, events, input, false, ForCall { made, sent })).await;
        // A call that sent no request lets the work start now.
        if let Some(store) = store.as_mut() {
            drop(store.data_mut().hooks.sent.take());
        }
        // Kept to be dropped in the next call's wait, when the cap allows; dropped now otherwise.
        ahead.used = store.and_then(|store| Counted::take().map(|counted| (store, counted)));
        outcome
    }
}

impl Made {
    /// A store and instance made now with `grants`, counted by `counted`, holding `folder` (a
    /// tool's, already resolved; its file operations then run inline, as on the call's own
    /// thread) or none; nothing is resolved here. `None` on any failure (the call then makes
    /// its own and reports the failure as usual).
    pub(crate) async fn make(
        artifact: &LoadedArtifact,
        host: &Host,
        grants: Grants,
        counted: Counted,
        folder: Option<Beneath>,
    ) -> Option<Made> {
        let Ok(Pre::Run(pre)) = artifact.pre().await else { return None };
        let inline_files = folder.is_some();
        let id = folder.as_ref().map(Beneath::identity).transpose().ok()?;
        let events = Arc::new(NoEvents);
        let mut store = new_store_in(host, &grants, events, &artifact.name, inline_files, folder.as_ref()).ok()?;
        drop(folder);
        let instance = pre.instantiate_async(&mut store).await.ok()?;
        Some(Made { store, instance, grants, folder: id, inline_files, _counted: counted })
    }

    /// Put the call's folder in: `grants`' scope resolved now, on the call's thread. The WASI
    /// context made ahead stays when it holds that very folder (the same device and inode,
    /// with its descriptor open all along) and runs file operations as the call does;
    /// otherwise (the folder was replaced, or not found in the wait) a context is built here
    /// with the folder just resolved, as for a store made at the call.
    pub(crate) fn folder_now(&mut self, grants: &Grants, inline_files: bool) -> Result<(), GrantError> {
        let Some(scope) = grants.folder() else { return Ok(()) };
        let dir = scope.resolve().map_err(GrantError::Scope)?;
        if self.inline_files == inline_files && self.folder.is_some() && dir.identity().ok() == self.folder {
            return Ok(());
        }
        let stderr = self.store.data().stderr.clone();
        self.store.data_mut().wasi = grants.wasi_ctx_in(stderr, inline_files, Some(&dir))?;
        (self.folder, self.inline_files) = (None, inline_files);
        Ok(())
    }

    /// This instance for a call with `grants`, if it was made with the same environment,
    /// limits and role, and holds no folder unless the call has one; the call's outgoing
    /// policy, disk meter and `events` go in.
    pub(crate) fn fit(mut self, grants: &Grants, events: Arc<dyn GuestEvents>) -> Option<Made> {
        let g = &self.grants;
        if g.env != grants.env || g.limits != grants.limits || g.role != grants.role {
            return None;
        }
        // A context holding a folder never serves a call that has none (a call with one checks
        // the folder in `folder_now`).
        if self.folder.is_some() && !grants.has_folder() {
            return None;
        }
        let state = self.store.data_mut();
        state.hooks.policy = grants.policy.clone();
        state.disk = CallDisk::new(grants.disk.clone(), grants.limits.disk_bytes);
        state.events = events;
        Some(self)
    }
}
