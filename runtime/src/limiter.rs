//! The per-call resource limiter. It refuses growth past the manifest's limits and remembers
//! that it did, so a trap that follows is reported as a limit, not as a crash.

use wasmtime::ResourceLimiter;

/// Limits of one store, and what was hit.
#[derive(Debug, Clone)]
pub struct CallLimiter {
    /// Bytes a memory may grow to.
    pub memory_bytes: u64,
    /// Elements a table may grow to.
    pub table_elements: u32,
    /// Instances a store may hold.
    pub instances: u32,
    /// Set when a memory growth was refused.
    pub memory_refused: bool,
    /// Set when a table growth was refused.
    pub table_refused: bool,
}

impl CallLimiter {
    /// A limiter with nothing hit yet.
    pub fn new(memory_bytes: u64, table_elements: u32, instances: u32) -> Self {
        CallLimiter { memory_bytes, table_elements, instances, memory_refused: false, table_refused: false }
    }
}

impl ResourceLimiter for CallLimiter {
    fn memory_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > self.memory_bytes {
            self.memory_refused = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn table_growing(&mut self, _current: usize, desired: usize, _maximum: Option<usize>) -> wasmtime::Result<bool> {
        if desired as u64 > u64::from(self.table_elements) {
            self.table_refused = true;
            return Ok(false);
        }
        Ok(true)
    }

    fn instances(&self) -> usize {
        self.instances as usize
    }

    fn tables(&self) -> usize {
        self.instances as usize
    }

    fn memories(&self) -> usize {
        self.instances as usize
    }
}
