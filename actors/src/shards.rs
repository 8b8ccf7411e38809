//! Where a host's capsules run: runtimes of one worker each, one per core, every capsule placed
//! on one of them for its session's life.
//!
//! One capsule's turn is a chain of hand-offs between its actors (`crate::workers` says why
//! one worker suits it). On a runtime with a worker per core, tokio wakes an idle worker
//! whenever a task makes two others ready, and a turn crosses between threads several times.
//! So a host launches each capsule on a shard: its session's actors, their tasks and its door
//! are spawned there and stay there, and a turn's hand-offs are queue pushes on one thread. The
//! host's own actors (supervisor, slots, API) stay on the process's runtime; messages between
//! them and a capsule cross runtimes as any message does.
//!
//! A capsule goes to the shard with the fewest capsules at its launch (the lowest index on a
//! tie) and never moves: a restart places it again. What this gives up is work stealing: two
//! busy capsules on one shard share its thread while another shard may idle. BENCHMARKS.md
//! ("Twenty-third pass") measures both.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::runtime::{Handle, Runtime};

/// A host's shards. Dropping it shuts their runtimes down without waiting for their tasks
/// (allowed inside an async context, where a host drops it).
pub struct Shards {
    shards: Vec<Shard>,
    /// Held while a placement picks its shard and counts itself there, so that two launches at
    /// once never both see the same shard as the emptiest.
    placing: std::sync::Mutex<()>,
}

struct Shard {
    runtime: Option<Runtime>,
    handle: Handle,
    capsules: Arc<AtomicUsize>,
}

/// One capsule's place: the shard it runs on, counted there until dropped.
pub struct Placement {
    index: usize,
    handle: Handle,
    capsules: Arc<AtomicUsize>,
}

impl Placement {
    /// The shard's runtime, to spawn the capsule's launch on.
    pub fn handle(&self) -> &Handle {
        &self.handle
    }

    /// Which shard.
    pub fn index(&self) -> usize {
        self.index
    }
}

impl Drop for Placement {
    fn drop(&mut self) {
        self.capsules.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Shards {
    /// One shard per core (`TOKIO_WORKER_THREADS`, when set, is the count instead).
    pub fn per_core() -> std::io::Result<Shards> {
        let from_env = std::env::var("TOKIO_WORKER_THREADS").ok().and_then(|v| v.parse().ok());
        let cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
        Shards::new(from_env.unwrap_or(cores))
    }

    /// `count` shards (at least one), each a runtime of one worker with its I/O and time
    /// drivers and its own timer floor (`crate::timer_floor`), as `capsule run`'s runtime has.
    pub fn new(count: usize) -> std::io::Result<Shards> {
        let shards = (0..count.max(1))
            .map(|i| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(format!("capsule-shard-{i}"))
                    .enable_all()
                    .build()?;
                {
                    let _entered = runtime.enter();
                    crate::timer_floor::spawn_timer_floor();
                }
                Ok(Shard { handle: runtime.handle().clone(), runtime: Some(runtime), capsules: Arc::default() })
            })
            .collect::<std::io::Result<Vec<_>>>()?;
        Ok(Shards { shards, placing: std::sync::Mutex::new(()) })
    }

    /// Place a capsule: the shard with the fewest capsules now.
    pub fn place(&self) -> Placement {
        let _placing = self.placing.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (index, shard) = self
            .shards
            .iter()
            .enumerate()
            .min_by_key(|(i, s)| (s.capsules.load(Ordering::SeqCst), *i))
            .expect("at least one shard");
        shard.capsules.fetch_add(1, Ordering::SeqCst);
        Placement { index, handle: shard.handle.clone(), capsules: shard.capsules.clone() }
    }

    /// Capsules placed on each shard now.
    pub fn loads(&self) -> Vec<usize> {
        self.shards.iter().map(|s| s.capsules.load(Ordering::SeqCst)).collect()
    }

    /// Each shard's runtime.
    pub fn handles(&self) -> impl Iterator<Item = &Handle> {
        self.shards.iter().map(|s| &s.handle)
    }
}

impl Drop for Shards {
    fn drop(&mut self) {
        for shard in &mut self.shards {
            if let Some(runtime) = shard.runtime.take() {
                runtime.shutdown_background();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capsule_goes_to_the_shard_with_the_fewest_and_leaves_it_when_its_placement_drops() {
        let shards = Shards::new(2).expect("shards");
        let a = shards.place();
        let b = shards.place();
        assert_eq!((a.index(), b.index()), (0, 1));
        let c = shards.place();
        assert_eq!(c.index(), 0, "a tie goes to the lowest index");
        assert_eq!(shards.loads(), vec![2, 1]);
        drop(a);
        assert_eq!(shards.loads(), vec![1, 1]);
        drop(c);
        assert_eq!(shards.place().index(), 0, "the emptier shard");
        assert_eq!(shards.loads(), vec![0, 1], "the placement just made was dropped at once");
    }

    #[test]
    fn placements_made_at_once_from_many_threads_are_spread_evenly() {
        let shards = Shards::new(2).expect("shards");
        for _ in 0..300 {
            let barrier = std::sync::Barrier::new(8);
            let placed: Vec<Placement> = std::thread::scope(|s| {
                let all: Vec<_> = (0..8)
                    .map(|_| {
                        s.spawn(|| {
                            barrier.wait();
                            shards.place()
                        })
                    })
                    .collect();
                all.into_iter().map(|t| t.join().expect("placed")).collect()
            });
            assert_eq!(shards.loads(), vec![4, 4]);
            drop(placed);
            assert_eq!(shards.loads(), vec![0, 0]);
        }
    }

    #[test]
    fn each_shard_runs_its_tasks_on_one_thread_of_its_own() {
        let shards = Shards::new(2).expect("shards");
        for (i, handle) in shards.handles().enumerate() {
            assert_eq!(handle.metrics().num_workers(), 1);
            let names = handle.block_on(async {
                let mut names = Vec::new();
                for _ in 0..4 {
                    names.push(
                        tokio::spawn(async { std::thread::current().name().map(str::to_string) }).await.expect("join"),
                    );
                }
                names
            });
            assert!(names.iter().all(|n| n.as_deref() == Some(&*format!("capsule-shard-{i}"))), "{names:?}");
        }
    }

    #[tokio::test]
    async fn shards_dropped_inside_a_runtime_do_not_panic() {
        let shards = Shards::new(2).expect("shards");
        let placed = shards.place();
        let answer = placed.handle().spawn(async { 7 }).await.expect("join");
        assert_eq!(answer, 7);
        drop(placed);
        drop(shards);
    }

    #[test]
    fn shards_dropped_by_a_task_of_their_own_shard_do_not_panic() {
        // A launch cancelled on its shard may hold the last reference to the host's shared
        // state, and so drop the shards from one of their own threads.
        let shards = Shards::new(2).expect("shards");
        let handle = shards.handles().next().expect("a shard").clone();
        let (tx, rx) = std::sync::mpsc::channel();
        handle.spawn(async move {
            drop(shards);
            let _ = tx.send(());
        });
        rx.recv_timeout(std::time::Duration::from_secs(10)).expect("the task dropped the shards and went on");
    }
}
