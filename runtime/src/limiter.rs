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

    #[test]
    fn tables_share_one_budget() {
        let mut l = CallLimiter::new(100, 10, 4);
        assert!(l.table_growing(0, 6, None).expect("ok"));
        assert!(!l.table_growing(0, 6, None).expect("ok"));
        assert!(l.table_refused);
    }
}
