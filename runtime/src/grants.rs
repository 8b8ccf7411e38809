//! Capability grants for one store (CONTRACT §4): environment, preopened folder, limits and
//! the outgoing policy. Deny by default: a guest gets no env but its `MURMUR_*` set and
//! `env.allow`, no folder unless it is a tool with a scope, no sockets, no DNS, and outbound
//! HTTP only through [`OutgoingPolicy`](crate::OutgoingPolicy).

use capsule_protocol::manifest::Limits;
use std::path::PathBuf;
use std::sync::Arc;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{FsPerms, WasiCtx, WasiCtxBuilder};

use crate::beneath::{Beneath, BeneathError};
use crate::budget::DiskMeter;
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
    /// A lifecycle hook: no folder, no network, `run-inference` only.
    Hook,
}

/// Everything one store is granted.
#[derive(Debug, Clone)]
pub struct Grants {
    /// Driver or tool.
    pub role: ArtifactRole,
    /// The environment, already filtered (MURMUR_* plus `env.allow`, never credentials).
    /// Shared: a call's grants are cloned for each instance made, and a clone of the
    /// environment is a count, not a copy of every name and value.
    pub env: Arc<[(String, String)]>,
    /// The folder preopened as `.` (tools only), resolved at every call.
    pub preopen: Option<Scope>,
    /// Per-call limits.
    pub limits: Limits,
    /// The outgoing HTTP policy.
    pub policy: OutgoingPolicy,
    /// Bytes written to files by the session's calls (shared by every artifact of a session).
    pub disk: DiskMeter,
}

/// A tool's scope: a folder beneath the workdir. It is resolved at every call, one component
/// at a time without following symlinks, so a folder another tool swapped for a symlink
/// refuses the call instead of widening the scope.
#[derive(Debug, Clone)]
pub struct Scope {
    /// The workdir (made by the host; no guest can replace it).
    pub workdir: PathBuf,
    /// The scope relative to it (`.` for the workdir itself).
    pub relative: String,
}

impl Scope {
    /// Resolve the scope now, creating missing folders `0700`.
    pub fn resolve(&self) -> Result<Beneath, BeneathError> {
        Beneath::open(&self.workdir)?.into_dir(&self.relative, true)
    }

    /// Resolve the scope now as [`Scope::resolve`] does, creating nothing: a missing folder is
    /// an error.
    pub fn find(&self) -> Result<Beneath, BeneathError> {
        Beneath::open(&self.workdir)?.into_dir(&self.relative, false)
    }
}

/// Why a store's WASI context could not be built.
#[derive(Debug, thiserror::Error)]
pub(crate) enum GrantError {
    /// The scope is a symlink, or not a folder.
    #[error(transparent)]
    Scope(BeneathError),
    /// WASI refused the preopen.
    #[error("preopen refused")]
    Wasi(#[source] wasmtime::Error),
}

impl Grants {
    /// Whether the call gets a folder: a tool with a scope.
    pub(crate) fn has_folder(&self) -> bool {
        self.folder().is_some()
    }

    /// The scope of the call's folder: a tool's, none otherwise.
    pub(crate) fn folder(&self) -> Option<&Scope> {
        self.preopen.as_ref().filter(|_| self.role == ArtifactRole::Tool)
    }

    /// Build the WASI context. Network, DNS and the host's own env, args and stdio are never
    /// inherited; stderr goes to `stderr` so a trap can be explained. `inline_files`: file
    /// operations run on the calling thread instead of each on a blocking-pool thread.
    /// `folder`, a tool's folder already resolved, is preopened as `.` (none: no folder).
    pub(crate) fn wasi_ctx_in(
        &self,
        stderr: MemoryOutputPipe,
        inline_files: bool,
        folder: Option<&Beneath>,
    ) -> Result<WasiCtx, GrantError> {
        let mut b = WasiCtxBuilder::new();
        b.stderr(stderr);
        b.allow_blocking_current_thread(inline_files);
        b.allow_tcp(false).allow_udp(false).allow_ip_name_lookup(false);
        for (k, v) in self.env.iter() {
            b.env(k, v);
        }
        if let Some(dir) = folder {
            // The kernel opens exactly the folder resolved; `dir` may close after this.
            b.preopened_dir(dir.fd_path(), ".", FsPerms::ReadWrite).map_err(GrantError::Wasi)?;
        }
        Ok(b.build())
    }
}
