//! Loading an artifact: read, check it is a component, check its imports and export, compile
//! (through the cache) and pre-link.
//!
//! The checks read the component's imports and exports from its bytes before anything is
//! compiled ([`crate::surface`]), so a refused component is named with the exact interface
//! that is missing or not allowed (E-CAP-003 / E-CAP-004) and never compiled.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use wasmtime::component::Component;

use crate::bindings::ArtifactHostPre as HostPre;
use crate::bindings::hook::HookPre;
use crate::cache::{CacheHit, ComponentCache};
use crate::engine::{Host, compile_err};
use crate::error::{CallError, LoadError};
use crate::later::Later;
use crate::state::StoreState;
use crate::surface::{self, Depth, Surface};

/// The export every driver and tool must have.
pub const REQUIRED_EXPORT: &str = "murmur:tool/run@0.1.0";

/// The `murmur:*` interfaces a component may import.
pub const ALLOWED_MURMUR_IMPORTS: [&str; 3] =
    ["murmur:stream/events@0.1.0", "murmur:text/chunks@0.1.0", "murmur:task/task@0.1.0"];

/// The export every hook must have.
pub const HOOK_EXPORT: &str = "murmur:hook/lifecycle@0.5.0";

/// The `murmur:*` interfaces a hook may import: `run-inference`, and the lifecycle interface
/// for the `message` type that `run-inference` uses.
pub const HOOK_MURMUR_IMPORTS: [&str; 2] = ["murmur:runtime/inference@0.2.0", "murmur:hook/lifecycle@0.5.0"];

/// WASI 0.2 packages a component may import (any 0.2.x version). Sockets are linked but the
/// context grants none, so importing them is allowed and useless.
const ALLOWED_WASI: [&str; 7] =
    ["wasi:cli/", "wasi:clocks/", "wasi:random/", "wasi:io/", "wasi:filesystem/", "wasi:http/", "wasi:sockets/"];

/// Which world a component is checked and pre-linked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ComponentKind {
    /// A driver or tool: exports `murmur:tool/run@0.1.0`.
    Run,
    /// A lifecycle hook: exports `murmur:hook/lifecycle@0.5.0`.
    Hook,
}

/// The pre-linked component, by kind.
#[derive(Clone)]
pub(crate) enum Pre {
    Run(HostPre<StoreState>),
    Hook(HookPre<StoreState>),
}

/// When a component missing from the cache is compiled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compile {
    /// Before the load returns.
    Now,
    /// On a thread of its own, after the load has checked and validated it; its first call
    /// waits ([`crate::later`]). For tools and drivers other than the primary: nothing calls
    /// one before the model asks for it or a switch names it.
    Background,
}

/// A checked artifact, compiled and pre-linked or being compiled in the background.
#[derive(Clone)]
pub struct LoadedArtifact {
    pub(crate) name: String,
    kind: ComponentKind,
    linked: Linking,
    /// Where the compiled code came from.
    pub cache_hit: CacheHit,
    /// Time spent loading (read + check + compile or cache load + pre-link; for a compile in
    /// the background, the check and validation only).
    pub load_time: std::time::Duration,
    /// The `murmur:` interfaces the component imports (only those it uses).
    pub murmur_imports: Vec<String>,
}

/// The pre-linked component, or the compile that makes it.
#[derive(Clone)]
enum Linking {
    Ready(Pre),
    Later(Arc<Later>),
}

impl std::fmt::Debug for LoadedArtifact {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LoadedArtifact")
            .field("name", &self.name)
            .field("cache_hit", &self.cache_hit)
            .finish_non_exhaustive()
    }
}

fn allowed_import(kind: ComponentKind, name: &str) -> bool {
    let murmur = match kind {
        ComponentKind::Run => ALLOWED_MURMUR_IMPORTS.as_slice(),
        ComponentKind::Hook => HOOK_MURMUR_IMPORTS.as_slice(),
    };
    murmur.contains(&name) || (ALLOWED_WASI.iter().any(|p| name.starts_with(p)) && name.contains("@0.2."))
}

/// Refuse a component whose imports or exports do not fit `kind` (E-CAP-003 / E-CAP-004).
fn check(name: &str, kind: ComponentKind, surface: &Surface) -> Result<(), LoadError> {
    if let Some(import) = surface.imports.iter().find(|i| !allowed_import(kind, i)) {
        return Err(LoadError::UnknownImport { artifact: name.into(), interface: import.clone() });
    }
    let (export, what) = match kind {
        ComponentKind::Run => (REQUIRED_EXPORT, "driver and tool"),
        ComponentKind::Hook => (HOOK_EXPORT, "hook"),
    };
    if !surface.exports.iter().any(|n| n == export) {
        let exports = if surface.exports.is_empty() { "nothing".to_string() } else { surface.exports.join(", ") };
        return Err(LoadError::MissingExport { artifact: name.into(), export, kind: what, exports });
    }
    Ok(())
}

/// Pre-link a compiled component against `kind`'s world.
fn link(host: &Host, name: &str, component: &Component, kind: ComponentKind) -> Result<Pre, LoadError> {
    let pre = host.linker.instantiate_pre(component).map_err(|e| compile_err(name, e))?;
    Ok(match kind {
        ComponentKind::Run => Pre::Run(HostPre::new(pre).map_err(|e| compile_err(name, e))?),
        ComponentKind::Hook => Pre::Hook(HookPre::new(pre).map_err(|e| compile_err(name, e))?),
    })
}

/// Compile `bytes` (content `key`) through the cache and pre-link them (a background compile's
/// work).
pub(crate) fn compile_and_link(
    host: &Host,
    name: &str,
    key: &[u8; 32],
    bytes: &[u8],
    kind: ComponentKind,
) -> Result<Pre, LoadError> {
    let component = match host.cache.lookup(&host.engine, key).map_err(|e| compile_err(name, e))? {
        Some((c, _)) => c,
        None => host.cache.compile(&host.engine, key, bytes).map_err(|e| compile_err(name, e))?,
    };
    link(host, name, &component, kind)
}

impl LoadedArtifact {
    /// Load the driver or tool `name` from a `.wasm` file.
    pub fn load_file(host: &Host, name: &str, path: &Path) -> Result<LoadedArtifact, LoadError> {
        Self::load_file_as(host, name, path, ComponentKind::Run)
    }

    /// Load the artifact `name` of `kind` from a `.wasm` file.
    pub fn load_file_as(
        host: &Host,
        name: &str,
        path: &Path,
        kind: ComponentKind,
    ) -> Result<LoadedArtifact, LoadError> {
        Self::load_file_with(host, name, path, kind, Compile::Now)
    }

    /// Load the artifact `name` of `kind` from a `.wasm` file, compiling it `when` it is not in
    /// the cache.
    pub fn load_file_with(
        host: &Host,
        name: &str,
        path: &Path,
        kind: ComponentKind,
        when: Compile,
    ) -> Result<LoadedArtifact, LoadError> {
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            artifact: name.into(),
            path: path.into(),
            source,
        })?;
        Self::load_bytes_with(host, name, path, &bytes, kind, when)
    }

    /// Load the driver or tool `name` from bytes (`path` is only for messages).
    pub fn load_bytes(host: &Host, name: &str, path: &Path, bytes: &[u8]) -> Result<LoadedArtifact, LoadError> {
        Self::load_bytes_as(host, name, path, bytes, ComponentKind::Run)
    }

    /// Load the artifact `name` of `kind` from bytes (`path` is only for messages).
    pub fn load_bytes_as(
        host: &Host,
        name: &str,
        path: &Path,
        bytes: &[u8],
        kind: ComponentKind,
    ) -> Result<LoadedArtifact, LoadError> {
        Self::load_bytes_with(host, name, path, bytes, kind, Compile::Now)
    }

    /// Load the artifact `name` of `kind` from bytes (`path` is only for messages), compiling
    /// it `when` it is not in the cache. Whatever `when` says, a refused component is refused
    /// here: its imports and exports are checked before anything is compiled, and one left
    /// to the background is validated first (one that fails validation is compiled now, so
    /// the refusal is the compiler's own).
    pub fn load_bytes_with(
        host: &Host,
        name: &str,
        path: &Path,
        bytes: &[u8],
        kind: ComponentKind,
        when: Compile,
    ) -> Result<LoadedArtifact, LoadError> {
        let started = Instant::now();
        match bytes.get(0..8) {
            Some([0, b'a', b's', b'm', 0x0d, 0, 1, 0]) => {}
            Some([0, b'a', b's', b'm', 1, 0, 0, 0]) => {
                return Err(LoadError::NotComponent {
                    artifact: name.into(),
                    path: path.into(),
                    what: "a core WebAssembly module, not a component",
                });
            }
            _ => {
                return Err(LoadError::NotComponent {
                    artifact: name.into(),
                    path: path.into(),
                    what: "not WebAssembly at all",
                });
            }
        }
        let malformed = |e| LoadError::Compile { artifact: name.into(), source: Box::new(e) };
        let surface = surface::read(bytes, Depth::Names).map_err(malformed)?;
        check(name, kind, &surface)?;
        let murmur_imports = surface.imports.into_iter().filter(|n| n.starts_with("murmur:")).collect();
        let key = ComponentCache::key_of(bytes);
        let found = host.cache.lookup(&host.engine, &key).map_err(|e| compile_err(name, e))?;
        let later = when == Compile::Background
            && found.is_none()
            && surface::read(bytes, Depth::Validate)
                .inspect_err(|e| tracing::debug!(artifact = name, error = %e, "fails validation; compiling now"))
                .is_ok();
        let (linked, cache_hit) = match found {
            None if later => (Linking::Later(crate::later::start(host, key, name, bytes, kind)), CacheHit::Background),
            Some((component, hit)) => (Linking::Ready(link(host, name, &component, kind)?), hit),
            None => {
                let component = host.cache.compile(&host.engine, &key, bytes).map_err(|e| compile_err(name, e))?;
                (Linking::Ready(link(host, name, &component, kind)?), CacheHit::Compiled)
            }
        };
        Ok(LoadedArtifact { name: name.into(), kind, linked, cache_hit, load_time: started.elapsed(), murmur_imports })
    }

    /// The pre-linked component, waiting for its compile when that runs in the background. A
    /// compile that failed refuses the call with its error.
    pub(crate) async fn pre(&self) -> Result<&Pre, CallError> {
        let linked = match &self.linked {
            Linking::Ready(pre) => return Ok(pre),
            Linking::Later(later) => later.wait().await,
        };
        linked.as_ref().map_err(|e| CallError::Compile { artifact: self.name.clone(), source: e.clone() })
    }

    /// Wait for a compile in the background to end; its error, when it failed (for a check
    /// that must report what a launch leaves to the first call).
    pub async fn compiled(&self) -> Result<(), Arc<LoadError>> {
        match &self.linked {
            Linking::Ready(_) => Ok(()),
            Linking::Later(later) => later.wait().await.as_ref().map(|_| ()).map_err(Arc::clone),
        }
    }

    /// Whether the component is compiled and pre-linked (false while its compile runs in the
    /// background, or when that compile failed).
    pub fn is_compiled(&self) -> bool {
        match &self.linked {
            Linking::Ready(_) => true,
            Linking::Later(later) => later.get().is_some_and(|l| l.is_ok()),
        }
    }

    /// The artifact's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The world it was loaded against.
    pub fn kind(&self) -> ComponentKind {
        self.kind
    }
}
