//! The per-call resource limiter. It counts every linear memory and every table of a store
//! together (a component with eight memories gets the same budget as one with a single
//! memory), refuses growth past the manifest's limits, and remembers that it did, so a trap
//! that follows is reported as a limit, not as a crash.

use wasmtime::ResourceLimiter;

/// Linear memories (and tables) one store may hold; matches the pooling allocator's
/// per-component maximum, and bounds on-demand allocation the same way.
pub const MAX_MEMORIES: usize = 8;
/// Tables one store may hold.
pub const MAX_TABLES: usize = 16;

/// Limits of one store, and what was hit.
#[derive(Debug, Clone)]
pub struct CallLimiter {
    /// Bytes all memories of the store may hold together.
    pub memory_bytes: u64,
    /// Elements all tables of the store may hold together.
    pub table_elements: u32,
    /// Instances a store may hold.
    pub instances: u32,
    /// Bytes held by all memories now.
    pub memory_total: u64,
    /// Elements held by all tables now.
    pub table_total: u64,
    /// Set when a memory growth was refused.
    pub memory_refused: bool,
    /// Set when a table growth was refused.
    pub table_refused: bool,
}

impl CallLimiter {
    /// A limiter with nothing hit yet.
    pub fn new(memory_bytes: u64, table_elements: u32, instances: u32) -> Self {
        CallLimiter {
            memory_bytes,
            table_elements,
            instances,
            memory_total: 0,
            table_total: 0,
            memory_refused: false,
            table_refused: false,
        }
    }
}

/// The store-wide total after one memory (or table) grows from `current` to `desired`, when
/// it stays within `limit`.
fn grown(total: u64, current: usize, desired: usize, limit: u64) -> Option<u64> {
    let after = total.saturating_sub(current as u64).checked_add(desired as u64)?;
    (after <= limit).then_some(after)
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        match grown(self.memory_total, current, desired, self.memory_bytes) {
            Some(t) => {
                self.memory_total = t;
                Ok(true)
            }
            None => {
                self.memory_refused = true;
                Ok(false)
            }
        }
    }

    fn table_growing(&mut self, current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        match grown(self.table_total, current, desired, u64::from(self.table_elements)) {
            Some(t) => {
                self.table_total = t;
                Ok(true)
            }
            None => {
                self.table_refused = true;
                Ok(false)
            }
        }
    }

    fn instances(&self) -> usize {
        self.instances as usize
    }

    fn tables(&self) -> usize {
        MAX_TABLES
    }

    fn memories(&self) -> usize {
        MAX_MEMORIES
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn many_memories_share_one_budget() {
        let mut l = CallLimiter::new(100, 10, 4);
        assert!(l.memory_growing(0, 40, None).expect("ok"));
        assert!(l.memory_growing(0, 40, None).expect("ok"), "a second memory within the total");
        assert!(!l.memory_growing(0, 40, None).expect("ok"), "a third would pass the total");
        assert!(l.memory_refused);
        assert!(l.memory_growing(40, 60, None).expect("ok"), "growing one memory counts only the delta");
        assert_eq!(l.memory_total, 100);
    }

    /// A component of `n` core instances, each with a memory of `pages` 64 KiB pages.
    fn many_memories(n: usize, pages: u32) -> Vec<u8> {
        let instances: String = (0..n).map(|_| "(core instance (instantiate $m))\n").collect();
        wat::parse_str(format!("(component (core module $m (memory {pages})) {instances})")).expect("valid wat")
    }

    /// Compile and instantiate under a limiter, with the pooling allocator or on demand;
    /// false when either step refuses.
    async fn instantiate(bytes: &[u8], memory_bytes: u64, pooling: bool) -> (bool, CallLimiter) {
        let engine = wasmtime::Engine::new(&crate::engine::config(pooling)).expect("engine");
        let mut store = wasmtime::Store::new(&engine, CallLimiter::new(memory_bytes, 1000, 100));
        store.limiter(|l| l);
        let Ok(component) = wasmtime::component::Component::new(&engine, bytes) else {
            return (false, store.data().clone());
        };
        let linker = wasmtime::component::Linker::<CallLimiter>::new(&engine);
        let ok = linker.instantiate_async(&mut store, &component).await.is_ok();
        (ok, store.data().clone())
    }

    #[tokio::test]
    async fn a_component_with_many_memories_gets_one_budget_for_all_of_them() {
        for pooling in [true, false] {
            // Eight memories of 10 MiB: each alone is far below 64 MiB, together they are not.
            let (ok, l) = instantiate(&many_memories(8, 160), 64 * 1024 * 1024, pooling).await;
            assert!(!ok && l.memory_refused, "eight 10 MiB memories passed a 64 MiB budget (pooling {pooling})");
            assert!(l.memory_total <= 64 * 1024 * 1024);
            let (ok, l) = instantiate(&many_memories(4, 160), 64 * 1024 * 1024, pooling).await;
            assert!(ok && !l.memory_refused, "four fit (pooling {pooling})");
            assert_eq!(l.memory_total, 4 * 160 * 65536);
        }
    }

    #[tokio::test]
    async fn more_memories_than_the_store_allows_are_refused_with_or_without_the_pool() {
        for pooling in [true, false] {
            let (ok, _) = instantiate(&many_memories(MAX_MEMORIES + 1, 1), u64::MAX, pooling).await;
            assert!(!ok, "{} memories instantiated (pooling {pooling})", MAX_MEMORIES + 1);
            let (ok, _) = instantiate(&many_memories(MAX_MEMORIES, 1), u64::MAX, pooling).await;
            assert!(ok, "{MAX_MEMORIES} memories are allowed (pooling {pooling})");
        }
    }

    #[test]
    fn tables_share_one_budget() {
        let mut l = CallLimiter::new(100, 10, 4);
        assert!(l.table_growing(0, 6, None).expect("ok"));
        assert!(!l.table_growing(0, 6, None).expect("ok"));
        assert!(l.table_refused);
    }
}
