//! The tokio runtime a `capsule` process runs on, and how many workers it gets.
//!
//! One capsule's work is one sequence: the loop waits for the provider's answer, the journal's
//! write, the tool's result, and its actors mostly hand a turn's step from one to the next. On
//! one worker those hand-offs are queue pushes. With a second worker idle, tokio wakes it
//! whenever a task makes two others ready at once, it steals one of them, and the turn then
//! crosses between the two threads several times, each a wake of a sleeping thread (on a
//! virtual machine often tens of microseconds) and caches gone cold. A process that runs one
//! capsule (`capsule run`, `capsule demo`, and the clients) therefore gets one worker. Nothing
//! blocks it: a tool with a folder runs on a blocking-pool thread of its own, a guest that never
//! calls the host yields at every epoch tick, and components are compiled at launch, before the
//! door opens. That tool's thread is kept on the one worker's CPU while the worker waits for it
//! (`capsule_runtime`'s `affinity`), so the turn's hand-offs to and from it stay on one CPU too.
//! The one worker is the main thread itself (a current-thread runtime; see [`runtime`]).
//!
//! A host runs many capsules that do have work at the same time, and gets one worker per core
//! for its own actors; each capsule runs on a shard of one worker (`crate::shards`), so its
//! turn's hand-offs stay on one thread there too. `TOKIO_WORKER_THREADS` in the environment
//! overrides the counts.
//! BENCHMARKS.md ("Sixteenth pass") has the figures.

/// How many capsules a process runs, which decides its workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Workers {
    /// One capsule, or a client of one: one worker.
    One,
    /// Many capsules: one worker per core.
    PerCore,
}

/// The runtime for a process of this kind, with its I/O and time drivers.
///
/// One worker is tokio's current-thread runtime: the thread that calls `block_on` (the
/// process's main thread) runs every task, so the future it waits on and the tasks it spawned
/// share that thread. A multi-thread runtime of one worker kept the two on two threads and paid
/// for its work-stealing machinery with no one to steal. Its spawned tasks run only while a
/// thread is in its `block_on`, as the `capsule` binary is for the whole of its run.
/// `TOKIO_WORKER_THREADS` set gives a multi-thread runtime of that many workers instead.
pub fn runtime(workers: Workers) -> std::io::Result<tokio::runtime::Runtime> {
    let counted = std::env::var_os("TOKIO_WORKER_THREADS").is_some();
    let mut builder = match workers {
        Workers::One if !counted => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    };
    builder.enable_all().build()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// How many workers `rt` runs.
    fn workers_of(rt: &tokio::runtime::Runtime) -> usize {
        rt.metrics().num_workers()
    }

    #[test]
    fn one_capsule_gets_one_worker_and_a_host_one_per_core() {
        if std::env::var_os("TOKIO_WORKER_THREADS").is_some() {
            // The environment's count wins over both; what it is set to is the caller's.
            let one = runtime(Workers::One).expect("runtime");
            let many = runtime(Workers::PerCore).expect("runtime");
            assert_eq!(workers_of(&one), workers_of(&many));
            return;
        }
        let one = runtime(Workers::One).expect("runtime");
        assert_eq!(workers_of(&one), 1);
        assert_eq!(one.handle().runtime_flavor(), tokio::runtime::RuntimeFlavor::CurrentThread);
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        assert_eq!(workers_of(&runtime(Workers::PerCore).expect("runtime")), cores);
    }
}
