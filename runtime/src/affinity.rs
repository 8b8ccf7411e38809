//! Where a tool call's own thread runs: on the CPU of the runtime's one worker, while the worker
//! waits on that call alone.
//!
//! A tool with a folder runs on a blocking-pool thread (see [`crate::LoadedArtifact::call`]).
//! A turn hands the call to that thread and waits for its answer, so the two threads take
//! turns and never need two CPUs at once. Left to the kernel, a woken thread goes to an idle
//! CPU: each hand-off then wakes a second CPU and moves the call's data between caches.
//!
//! So when the runtime has one worker (`capsule run`: one capsule) and no other such call is
//! running, the call's thread is kept on the CPU that worker is on when it asks, and stays
//! there while idle, so the next call's wake lands beside the worker. The worker itself is
//! never pinned: the kernel may move it, and the next call's thread follows. Calls that run at
//! the same time may need a CPU each, so a call that starts while another runs in the process
//! gets back the CPUs its thread had before. A host's shards each have one worker, so a host's
//! call is kept beside its shard's worker when it is the process's only call running; a
//! runtime with a worker per core is left to the kernel.

use rustix::thread::CpuSet;
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Tool calls on threads of their own now running in this process.
static IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// The CPU this thread is kept on, and the CPUs it had before.
    static KEPT: Cell<Option<(usize, CpuSet)>> = const { Cell::new(None) };
}

/// Where one call's thread should run, decided by the asking side; counts the call as running
/// until dropped (move it into the call's thread, and drop it with the call's answer).
pub(crate) struct Place {
    beside: Option<usize>,
    /// Whether this place counts as a call running (a thread readied at launch does not).
    counted: bool,
}

impl Place {
    /// Ask on the calling side (a runtime worker).
    pub(crate) fn ask() -> Place {
        let alone = IN_FLIGHT.fetch_add(1, Ordering::SeqCst) == 0;
        Place { beside: Place::worker_cpu(alone), counted: true }
    }

    /// For a thread readied ahead of the calls: where the next call's thread would go, not
    /// counted as a call (a first call asked while it readies is still alone).
    pub(crate) fn ahead() -> Place {
        Place { beside: Place::worker_cpu(IN_FLIGHT.load(Ordering::SeqCst) == 0), counted: false }
    }

    /// The asking worker's CPU, when the current runtime has one worker and the call is alone.
    fn worker_cpu(alone: bool) -> Option<usize> {
        let one_worker =
            tokio::runtime::Handle::try_current().is_ok_and(|runtime| runtime.metrics().num_workers() == 1);
        if alone && one_worker { current_cpu().filter(|&cpu| cpu < CpuSet::MAX_CPU) } else { None }
    }

    /// On the call's thread: move it there (one system call, none when it is kept there
    /// already), or give it back the CPUs it had when it is not to be kept. A refusal (a CPU
    /// outside this process's set) leaves the thread where the kernel puts it.
    pub(crate) fn take(&self) {
        KEPT.with(|kept| match (self.beside, kept.get()) {
            (Some(cpu), Some((on, _))) if on == cpu => {}
            (Some(cpu), before) => {
                let Some(before) = before.map(|(_, b)| b).or_else(|| rustix::thread::sched_getaffinity(None).ok())
                else {
                    return;
                };
                let mut set = CpuSet::new();
                set.set(cpu);
                match rustix::thread::sched_setaffinity(None, &set) {
                    Ok(()) => kept.set(Some((cpu, before))),
                    Err(e) => tracing::debug!(cpu, error = %e, "a tool call's thread stays where the kernel puts it"),
                }
            }
            (None, Some((_, before))) => {
                if let Err(e) = rustix::thread::sched_setaffinity(None, &before) {
                    tracing::debug!(error = %e, "a tool call's thread keeps its one CPU");
                }
                kept.set(None);
            }
            (None, None) => {}
        });
    }
}

/// The CPU this thread is on now (`None` when the kernel does not say). glibc's lookup, not
/// rustix's: rustix reads the vDSO's ELF header at the address the auxiliary vector gives, and
/// faults when nothing is mapped there (as under valgrind, which keeps the vector's entry but
/// not the vDSO); glibc finds the vDSO through its own loader and falls back to the system
/// call.
#[allow(unsafe_code)]
fn current_cpu() -> Option<usize> {
    // SAFETY: `sched_getcpu` takes no arguments and only returns a number (-1 on failure).
    let cpu = unsafe { libc::sched_getcpu() };
    usize::try_from(cpu).ok()
}

#[cfg(test)]
impl Place {
    /// A place decided here, counted as running like an asked one.
    fn at(beside: Option<usize>) -> Place {
        IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
        Place { beside, counted: true }
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        if self.counted {
            IN_FLIGHT.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPUs the current thread may run on.
    fn allowed() -> Vec<usize> {
        let set = rustix::thread::sched_getaffinity(None).expect("affinity");
        (0..CpuSet::MAX_CPU).filter(|&c| set.is_set(c)).collect()
    }

    /// Where a call asked from a task of `rt` would run.
    fn asked_in(rt: &tokio::runtime::Runtime) -> Place {
        rt.block_on(async { tokio::spawn(async { Place::ask() }).await.expect("join") })
    }

    // One test, not several: the count of calls running is the process's (and nextest gives
    // each test a process of its own).
    #[test]
    fn a_lone_call_of_a_one_worker_runtime_is_kept_beside_it_and_others_are_left_to_the_kernel() {
        let one = tokio::runtime::Builder::new_multi_thread().worker_threads(1).build().expect("rt");
        let two = tokio::runtime::Builder::new_multi_thread().worker_threads(2).build().expect("rt");
        let first = asked_in(&one);
        let cpu = first.beside.expect("one worker, one call: a CPU");
        let all = allowed();
        assert!(all.contains(&cpu), "the worker's CPU {cpu} is one this process may use");
        // A second call while the first runs, a multi-worker runtime, or no runtime: no CPU.
        let second = asked_in(&one);
        assert_eq!(second.beside, None, "another call is running");
        drop(second);
        drop(first);
        let (multi, outside) = (asked_in(&two), Place::ask());
        assert_eq!((multi.beside, outside.beside), (None, None));
        drop((multi, outside));
        // A thread readied ahead goes beside the worker too, and a call asked meanwhile is alone.
        let ahead = one.block_on(async { tokio::spawn(async { Place::ahead() }).await.expect("join") });
        assert!(ahead.beside.is_some(), "readied beside the one worker");
        let again = asked_in(&one);
        drop(ahead);
        // The worker may have moved since: the thread follows it.
        let cpu = again.beside.expect("alone: the others ended, and a readied thread is no call");
        assert!(all.contains(&cpu));
        std::thread::spawn(move || {
            again.take();
            assert_eq!(allowed(), vec![cpu]);
            assert_eq!(current_cpu(), Some(cpu), "moved there at once");
            again.take();
            assert_eq!(allowed(), vec![cpu], "kept there");
            // A call that is not to be kept gives the thread back its CPUs.
            Place::at(None).take();
            assert_eq!(allowed(), all);
            // A CPU this process may not use leaves the thread as it is.
            Place::at(Some(CpuSet::MAX_CPU - 1)).take();
            assert_eq!(allowed(), all);
        })
        .join()
        .expect("thread");
    }
}
