//! Capability grants for one store (CONTRACT §4): environment, preopened folder, limits and
//! the outgoing policy. Deny by default: a guest gets no env but its `MURMUR_*` set and
//! `env.allow`, no folder unless it is a tool with a scope, no sockets, no DNS, and outbound
//! HTTP only through [`OutgoingPolicy`](crate::OutgoingPolicy).

use capsule_protocol::manifest::Limits;
use std::path::PathBuf;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

use crate::policy::OutgoingPolicy;

/// Bytes of a guest's stderr kept to explain a trap.
pub const STDERR_CAPTURE_BYTES: usize = 64 * 1024;

/// Whether the artifact is a driver or a tool: drivers get no folder and their
/// `tool-call-*` events count; tools get the scope and their `tool-call-*` events are ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArtifactRole {
    /// An inference driver.
    Driver,
    /// A tool.
    Tool,
}

/// Everything one store is granted.
#[derive(Debug, Clone)]
pub struct Grants {
    /// Driver or tool.
    pub role: ArtifactRole,
    /// The environment, already filtered (MURMUR_* plus `env.allow`, never credentials).
    pub env: Vec<(String, String)>,
    /// The host folder preopened as `.` (tools only).
    pub preopen: Option<PathBuf>,
    /// Per-call limits.
    pub limits: Limits,
    /// The outgoing HTTP policy.
    pub policy: OutgoingPolicy,
}

impl Grants {
    /// Build the WASI context. Network, DNS and the host's own env, args and stdio are never
    /// inherited; stderr goes to `stderr` so a trap can be explained.
    pub(crate) fn wasi_ctx(&self, stderr: MemoryOutputPipe) -> std::io::Result<WasiCtx> {
        let mut b = WasiCtxBuilder::new();
        b.stderr(stderr);
        b.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        for (k, v) in &self.env {
            b.env(k, v);
        }
        if let (ArtifactRole::Tool, Some(dir)) = (self.role, &self.preopen) {
            b.preopened_dir(dir, ".", FsPerms::ReadWrite).map_err(std::io::Error::other)?;
        }
        Ok(b.build())
    }
}
