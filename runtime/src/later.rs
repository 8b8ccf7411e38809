//! A component compiled in the background: a launch that finds a tool missing from the
//! component cache checks it (names and validation, [`crate::surface`]) and starts the
//! session; the compile runs on a thread of its own, and the tool's first call (or its
//! instance made ahead) waits for it.
//!
//! Guarantees:
//! - a call never runs anything but the compiled, pre-linked component: it waits for the
//!   compile, and a compile that fails (or panics) makes every call of the tool a refusal
//!   with the compile's error (E-CAP-005), never a hang;
//! - one compile per component, kind and artifact name at a time in a host: a second launch
//!   of the same bytes under the same name while the first compile runs waits for that one
//!   (the name is part of the key because the compile's error names the artifact);
//! - the process waits for compiles still running before it exits
//!   ([`finish_background_compiles`]), so the `.cwasm` reaches the cache and the next launch
//!   is warm.

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex, OnceLock};
use std::thread::JoinHandle;

use tokio::sync::Notify;

use crate::engine::Host;
use crate::error::LoadError;
use crate::load::{ComponentKind, Pre};

/// What a background compile ends with.
pub(crate) type Linked = Result<Pre, Arc<LoadError>>;

/// One background compile's result, once it is there.
#[derive(Default)]
pub(crate) struct Later {
    done: OnceLock<Linked>,
    told: Notify,
}

impl Later {
    /// The result, waiting for the compile when it is still running.
    pub(crate) async fn wait(&self) -> &Linked {
        loop {
            let told = self.told.notified();
            tokio::pin!(told);
            // Registered before the check, so a result set in between still wakes this.
            told.as_mut().enable();
            if let Some(done) = self.done.get() {
                return done;
            }
            told.await;
        }
    }

    /// The result, when the compile has ended.
    pub(crate) fn get(&self) -> Option<&Linked> {
        self.done.get()
    }

    fn finish(&self, linked: Linked) {
        let _ = self.done.set(linked);
        self.told.notify_waiters();
    }
}

/// What a background compile is known by: the cache's key of the bytes, the world, and the
/// artifact's name (its error names the artifact, so a capsule never sees another's name).
type Job = ([u8; 32], ComponentKind, String);

/// The background compiles running in one host.
#[derive(Default)]
pub(crate) struct Compiling {
    running: Mutex<HashMap<Job, Arc<Later>>>,
}

/// Compile threads not yet joined (the process's, for [`finish_background_compiles`]).
static THREADS: Mutex<Vec<JoinHandle<()>>> = Mutex::new(Vec::new());

/// Wait for every background compile of this process to end (each writes its `.cwasm`). A
/// process calls it before it exits.
pub fn finish_background_compiles() {
    let threads = std::mem::take(&mut *THREADS.lock().unwrap_or_else(|p| p.into_inner()));
    for t in threads {
        let _ = t.join();
    }
}

/// Compile `bytes` (content `key`, checked by the caller) as `kind` on a thread of its own,
/// or join the compile of the same content, kind and name already running in `host`.
pub(crate) fn start(host: &Host, key: [u8; 32], name: &str, bytes: &[u8], kind: ComponentKind) -> Arc<Later> {
    let job: Job = (key, kind, name.to_string());
    let mut running = host.compiling.running.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(later) = running.get(&job) {
        return later.clone();
    }
    let later = Arc::new(Later::default());
    running.insert(job.clone(), later.clone());
    drop(running);
    let work = {
        let (host, later, name, bytes) = (host.clone(), later.clone(), name.to_string(), bytes.to_vec());
        move || {
            let linked = std::panic::catch_unwind(AssertUnwindSafe(|| {
                crate::load::compile_and_link(&host, &name, &key, &bytes, kind)
            }))
            .unwrap_or_else(|_| {
                Err(LoadError::Compile { artifact: name.clone(), source: "the compiler panicked".into() })
            });
            if let Err(e) = &linked {
                tracing::warn!(artifact = name, error = %e, "a tool compiled in the background failed; its calls are refused");
            }
            later.finish(linked.map_err(Arc::new));
            host.compiling.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&job);
        }
    };
    // The job goes to the thread once it exists, so a thread that cannot be had leaves it
    // here to run now.
    let (tx, rx) = std::sync::mpsc::channel::<Box<dyn FnOnce() + Send>>();
    let spawned = std::thread::Builder::new().name("capsule-compile".into()).spawn(move || {
        if let Ok(job) = rx.recv() {
            job();
        }
    });
    match spawned {
        Ok(thread) => {
            let mut threads = THREADS.lock().unwrap_or_else(|p| p.into_inner());
            // Ended threads are let go (dropping the handle detaches them).
            threads.retain(|t| !t.is_finished());
            threads.push(thread);
            let _ = tx.send(Box::new(work));
        }
        // No thread to be had: compiled here, as without the background.
        Err(e) => {
            tracing::warn!(artifact = name, error = %e, "cannot start a compile thread; compiling now");
            work();
        }
    }
    later
}
