//! Running a call whose host functions block (a tool's WASI file operations) on the thread that
//! is already running it, without taking a runtime worker away.
//!
//! Each poll of the call runs inside [`tokio::task::block_in_place`]: for that poll the thread
//! stops being a worker, and the worker's queue moves to another thread, so a slow disk holds
//! only this thread and the runtime keeps all its workers. The call starts at once, on a thread
//! that is already awake, and its answer needs no thread woken to deliver it; moving a call to
//! the blocking pool instead woke a sleeping thread on the way there and another on the way
//! back, about 15 % of a tool-call turn on a 2-core VM (BENCHMARKS, fifteenth pass).
//!
//! The call stays an ordinary future between polls: dropping it drops the store, so the guest
//! stops at its next host call or epoch tick, as for any other call.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// Whether [`OffWorker`] can run here: only on tokio's multi-thread runtime (`block_in_place`
/// panics on the current-thread runtime, where nothing else could take the worker's queue).
pub(crate) fn available() -> bool {
    tokio::runtime::Handle::try_current()
        .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread)
}

/// A future each of whose polls runs inside `block_in_place`; see the module's text.
pub(crate) struct OffWorker<F>(Pin<Box<F>>);

impl<F: Future> OffWorker<F> {
    /// Wrap `call`, boxed: a call's future is several KiB.
    pub(crate) fn new(call: F) -> OffWorker<F> {
        OffWorker(Box::pin(call))
    }
}

impl<F: Future> Future for OffWorker<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let call = self.0.as_mut();
        tokio::task::block_in_place(move || call.poll(cx))
    }
}
