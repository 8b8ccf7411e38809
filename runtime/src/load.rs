//! Loading an artifact: read, check it is a component, check its imports and export, compile
//! (through the cache) and pre-link.
//!
//! The checks run on the component's type before linking, so a refused component is named
//! with the exact interface that is missing or not allowed (E-CAP-003 / E-CAP-004).

use std::path::Path;
use std::time::Instant;

use crate::bindings::ArtifactHostPre as HostPre;
use crate::bindings::hook::HookPre;
use crate::cache::CacheHit;
use crate::engine::{Host, compile_err};
use crate::error::LoadError;
use crate::state::StoreState;

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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

/// A checked, compiled and pre-linked artifact.
#[derive(Clone)]
pub struct LoadedArtifact {
    pub(crate) name: String,
    pub(crate) pre: Pre,
    /// Where the compiled code came from.
    pub cache_hit: CacheHit,
    /// Time spent loading (read + check + compile or cache load + pre-link).
    pub load_time: std::time::Duration,
    /// The `murmur:` interfaces the component imports (only those it uses).
    pub murmur_imports: Vec<String>,
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
        let bytes = std::fs::read(path).map_err(|source| LoadError::Read {
            artifact: name.into(),
            path: path.into(),
            source,
        })?;
        Self::load_bytes_as(host, name, path, &bytes, kind)
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
        let (component, cache_hit) =
            host.cache.get_or_compile(&host.engine, bytes).map_err(|e| compile_err(name, e))?;
        let ty = component.component_type();
        for (import, _) in ty.imports(&host.engine) {
            if !allowed_import(kind, import) {
                return Err(LoadError::UnknownImport { artifact: name.into(), interface: import.to_string() });
            }
        }
        let exports: Vec<String> = ty.exports(&host.engine).map(|(n, _)| n.to_string()).collect();
        let (export, what) = match kind {
            ComponentKind::Run => (REQUIRED_EXPORT, "driver and tool"),
            ComponentKind::Hook => (HOOK_EXPORT, "hook"),
        };
        if !exports.iter().any(|n| n == export) {
            let list = if exports.is_empty() {
                "nothing".to_string()
            } else {
                exports.iter().map(|n| n.as_str()).collect::<Vec<_>>().join(", ")
            };
            return Err(LoadError::MissingExport { artifact: name.into(), export, kind: what, exports: list });
        }
        let pre = host.linker.instantiate_pre(&component).map_err(|e| compile_err(name, e))?;
        let pre = match kind {
            ComponentKind::Run => Pre::Run(HostPre::new(pre).map_err(|e| compile_err(name, e))?),
            ComponentKind::Hook => Pre::Hook(HookPre::new(pre).map_err(|e| compile_err(name, e))?),
        };
        let murmur_imports =
            ty.imports(&host.engine).map(|(n, _)| n.to_string()).filter(|n| n.starts_with("murmur:")).collect();
        Ok(LoadedArtifact { name: name.into(), pre, cache_hit, load_time: started.elapsed(), murmur_imports })
    }

    /// The artifact's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The world it was loaded against.
    pub fn kind(&self) -> ComponentKind {
        match self.pre {
            Pre::Run(_) => ComponentKind::Run,
            Pre::Hook(_) => ComponentKind::Hook,
        }
    }
}
