//! A component compiled in the background: a launch that finds a tool (or a driver other than
//! the primary) missing from the component cache checks it (names and validation,
//! [`crate::surface`]) and starts the session; the compile runs on a thread of its own, and
//! the artifact's first call (or its instance made ahead) waits for it.
//!
//! Guarantees:
//! - a call never runs anything but the compiled, pre-linked component: it waits for the
//!   compile, and a compile that fails (or panics) makes every call of it a refusal
//!   with the compile's error (E-CAP-005), never a hang;
//! - one compile per component, kind and artifact name at a time in a host: a second launch
//!   of the same bytes under the same name while the first compile runs waits for that one
//!   (the name is part of the key because the compile's error names the artifact);
//! - at most [`most_at_once`] compiles run at once in a process (each already uses every
//!   core); the others wait their turn, in order;
//! - the process waits for compiles still running before it exits
//!   ([`finish_background_compiles`]), so the `.cwasm` reaches the cache and the next launch
//!   is warm.

use std::collections::{HashMap, VecDeque};
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

/// A compile to run.
type Work = Box<dyn FnOnce() + Send>;

/// The process's compiles waiting for a thread, and the threads running them.
struct Queue {
    waiting: VecDeque<Work>,
    /// Threads started and not yet joined (for [`finish_background_compiles`]).
    threads: Vec<JoinHandle<()>>,
    /// Threads taking work now.
    busy: usize,
}

static QUEUE: Mutex<Queue> = Mutex::new(Queue { waiting: VecDeque::new(), threads: Vec::new(), busy: 0 });

fn queue() -> std::sync::MutexGuard<'static, Queue> {
    QUEUE.lock().unwrap_or_else(|p| p.into_inner())
}

/// Compiles that run at once, at most: each already spreads its functions over every core,
/// so more at once would only multiply the memory compiling takes (a host launching many
/// capsules with tools it has never seen would otherwise compile all of them together).
fn most_at_once() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get()).clamp(1, 4)
}

/// A compile thread: takes the waiting compiles in order, and ends when none is left.
fn take_work() {
    loop {
        let work = {
            let mut q = queue();
            match q.waiting.pop_front() {
                Some(work) => work,
                None => {
                    q.busy -= 1;
                    return;
                }
            }
        };
        work();
    }
}

/// Queue `work`, and start a thread for it while fewer than [`most_at_once`] run.
fn submit(work: Work) {
    let mut q = queue();
    q.waiting.push_back(work);
    if q.busy >= most_at_once() {
        return;
    }
    // Ended threads are let go (dropping the handle detaches them).
    q.threads.retain(|t| !t.is_finished());
    match std::thread::Builder::new().name("capsule-compile".into()).spawn(take_work) {
        Ok(thread) => {
            q.busy += 1;
            q.threads.push(thread);
        }
        // No thread to be had and none running: compiled here, as without the background.
        Err(e) if q.busy == 0 => {
            tracing::warn!(error = %e, "cannot start a compile thread; compiling now");
            let work = q.waiting.pop_back();
            drop(q);
            if let Some(work) = work {
                work();
            }
        }
        // A running thread takes it in turn.
        Err(e) => tracing::warn!(error = %e, "cannot start another compile thread; the compile waits its turn"),
    }
}

/// Wait for every background compile of this process to end (each writes its `.cwasm`). A
/// process calls it before it exits.
pub fn finish_background_compiles() {
    loop {
        let threads = std::mem::take(&mut queue().threads);
        if threads.is_empty() {
            return;
        }
        for t in threads {
            let _ = t.join();
        }
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
                tracing::warn!(artifact = name, error = %e, "an artifact compiled in the background failed; its calls are refused");
            }
            later.finish(linked.map_err(Arc::new));
            host.compiling.running.lock().unwrap_or_else(|p| p.into_inner()).remove(&job);
        }
    };
    submit(Box::new(work));
    later
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Condvar;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[test]
    fn later_runs_every_compile_in_turn_and_never_more_at_once_than_its_bound() {
        static NOW: AtomicUsize = AtomicUsize::new(0);
        static MOST: AtomicUsize = AtomicUsize::new(0);
        static DONE: AtomicUsize = AtomicUsize::new(0);
        static OPEN: (Mutex<bool>, Condvar) = (Mutex::new(false), Condvar::new());
        let bound = most_at_once();
        let n = bound * 3 + 1;
        for _ in 0..n {
            // Each compile holds its thread until the test opens the gate.
            submit(Box::new(|| {
                MOST.fetch_max(NOW.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                let (open, told) = &OPEN;
                let mut o = open.lock().unwrap_or_else(|p| p.into_inner());
                while !*o {
                    o = told.wait(o).unwrap_or_else(|p| p.into_inner());
                }
                NOW.fetch_sub(1, Ordering::SeqCst);
                DONE.fetch_add(1, Ordering::SeqCst);
            }));
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while NOW.load(Ordering::SeqCst) < bound {
            assert!(std::time::Instant::now() < deadline, "the first {bound} compiles never started");
            std::thread::yield_now();
        }
        assert_eq!(MOST.load(Ordering::SeqCst), bound, "no more than {bound} compiles at once");
        assert_eq!(queue().waiting.len(), n - bound, "the others wait their turn");
        *OPEN.0.lock().unwrap_or_else(|p| p.into_inner()) = true;
        OPEN.1.notify_all();
        finish_background_compiles();
        assert_eq!(DONE.load(Ordering::SeqCst), n, "every queued compile ran before the join returned");
        assert_eq!(MOST.load(Ordering::SeqCst), bound);
        assert_eq!(queue().busy, 0, "the threads ended with the queue");
    }
}
