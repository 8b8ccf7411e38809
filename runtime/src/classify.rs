//! What a failed call was: a host limit, the memory limit, the deadline, a failed
//! instantiation or the guest's own trap, told from the error and the store's counters.

use std::time::Duration;
use wasmtime::component::ResourceTableError;
use wasmtime::{Store, Trap};

use crate::call::INSTANTIATE_DEADLINE;
use crate::engine::boxed;
use crate::error::CallError;
use crate::load::LoadedArtifact;
use crate::state::StoreState;

impl LoadedArtifact {
    pub(crate) fn classify(
        &self,
        e: wasmtime::Error,
        store: &Store<StoreState>,
        deadline: Duration,
        instantiating: bool,
    ) -> CallError {
        let lim = &store.data().limiter;
        let disk = &store.data().disk;
        if disk.refused() {
            return CallError::HostLimit {
                artifact: self.name.clone(),
                what: "bytes written to files in this session",
                limit: disk.limit(),
                key: "disk_bytes",
            };
        }
        let table_full =
            e.chain().any(|c| matches!(c.downcast_ref::<ResourceTableError>(), Some(ResourceTableError::Full)));
        if table_full {
            return CallError::HostLimit {
                artifact: self.name.clone(),
                what: "live WASI resources (header fields, streams, open files)",
                limit: store.data().table.max_capacity() as u64,
                key: "resources",
            };
        }
        if lim.memory_refused {
            return CallError::MemoryLimit {
                artifact: self.name.clone(),
                what: "memory",
                limit: lim.memory_bytes,
                key: "memory_bytes",
            };
        }
        if lim.table_refused {
            return CallError::MemoryLimit {
                artifact: self.name.clone(),
                what: "a table",
                limit: u64::from(lim.table_elements),
                key: "table_elements",
            };
        }
        let trap = e.downcast_ref::<Trap>().copied();
        if trap == Some(Trap::Interrupt) {
            let seconds = if instantiating { INSTANTIATE_DEADLINE.as_secs_f64() } else { deadline.as_secs_f64() };
            return CallError::Deadline { artifact: self.name.clone(), seconds };
        }
        if instantiating && trap.is_none() {
            return CallError::Instantiate { artifact: self.name.clone(), source: boxed(e) };
        }
        let said = guest_said(&stderr_text(store));
        CallError::Trap {
            artifact: self.name.clone(),
            trap: trap.map(|t| t.to_string()).unwrap_or_else(|| "host error".to_string()),
            stderr_note: if said.is_empty() { String::new() } else { format!("; guest said: {said}") },
            source: boxed(e),
        }
    }
}

/// The useful part of a guest's stderr: a Rust panic's location and message (the message is
/// on the line after `panicked at`), else the last non-empty line.
fn guest_said(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().collect();
    if let Some(i) = lines.iter().position(|l| l.contains("panicked at")) {
        let mut s = lines[i].trim().to_string();
        if let Some(next) = lines.get(i + 1).filter(|l| !l.trim().is_empty() && !l.starts_with("note:")) {
            s.push(' ');
            s.push_str(next.trim());
        }
        return s;
    }
    lines.iter().rev().find(|l| !l.trim().is_empty()).map(|l| l.trim().to_string()).unwrap_or_default()
}

pub(crate) fn stderr_text(store: &Store<StoreState>) -> String {
    String::from_utf8_lossy(&store.data().stderr.contents()).into_owned()
}
