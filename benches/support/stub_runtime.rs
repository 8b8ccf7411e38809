//! The runtime a bench's provider stubs run on: the one `capsule stub-provider` runs on (one
//! worker, the current-thread runtime), on a thread of its own, as a provider is another process:
//! the stubs' tasks never run on, or wake, the sessions' threads.

use capsule_actors::workers::{Workers, runtime};

/// The stubs' runtime, started on first use; enter it to start a stub there.
pub fn stub_runtime() -> &'static tokio::runtime::Handle {
    static HANDLE: std::sync::OnceLock<tokio::runtime::Handle> = std::sync::OnceLock::new();
    HANDLE.get_or_init(|| {
        let rt = runtime(Workers::One).expect("the stubs' runtime");
        let handle = rt.handle().clone();
        // A current-thread runtime runs its tasks inside its `block_on` only: this thread stays
        // there, as a process's main thread does.
        std::thread::Builder::new()
            .name("stubs".into())
            .spawn(move || rt.block_on(std::future::pending::<()>()))
            .expect("the stubs' thread");
        handle
    })
}
