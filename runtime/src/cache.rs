//! The component cache: compile once per process, and keep precompiled `.cwasm` files on disk
//! so a second launch does not recompile.
//!
//! The disk key is the SHA-256 of the wasm bytes plus a hash of the engine's
//! `precompile_compatibility_hash`, so a `.cwasm` made by another wasmtime version or engine
//! configuration is never loaded. A `.cwasm` that fails to load is recompiled and replaced.
//! Files are written to a temporary name and renamed, so a crash mid-write leaves no torn file.

use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::path::PathBuf;
use std::sync::Mutex;
use wasmtime::Engine;
use wasmtime::component::Component;

/// What a lookup did, for benchmarks and the trace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CacheHit {
    /// Found compiled in this process.
    Memory,
    /// Loaded a precompiled `.cwasm` from disk.
    Disk,
    /// Compiled from the wasm bytes.
    Compiled,
}

/// Compiled components by content hash.
pub struct ComponentCache {
    dir: Option<PathBuf>,
    compat: String,
    memory: Mutex<HashMap<[u8; 32], Component>>,
}

impl ComponentCache {
    pub(crate) fn new(dir: Option<PathBuf>, engine: &Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        ComponentCache { dir, compat: format!("{:016x}", h.finish()), memory: Mutex::new(HashMap::new()) }
    }

    /// The cache folder, when on disk.
    pub fn dir(&self) -> Option<&PathBuf> {
        self.dir.as_ref()
    }

    pub(crate) fn get_or_compile(&self, engine: &Engine, bytes: &[u8]) -> wasmtime::Result<(Component, CacheHit)> {
        let key: [u8; 32] = Sha256::digest(bytes).into();
        if let Some(c) = self.memory.lock().unwrap_or_else(|p| p.into_inner()).get(&key) {
            return Ok((c.clone(), CacheHit::Memory));
        }
        let path = self.dir.as_ref().map(|d| d.join(format!("{}-{}.cwasm", hex::encode(key), self.compat)));
        let mut hit = CacheHit::Compiled;
        let mut component = None;
        if let Some(p) = path.as_ref().filter(|p| p.exists()) {
            // SAFETY: the file was written by this cache from `Component::serialize` of an
            // engine with the same compatibility hash (part of the file name); files are
            // renamed into place whole, so a partial file is never read.
            #[allow(unsafe_code)]
            match unsafe { Component::deserialize_file(engine, p) } {
                Ok(c) => {
                    hit = CacheHit::Disk;
                    component = Some(c);
                }
                Err(e) => tracing::warn!(path = %p.display(), error = %e, "ignoring unreadable .cwasm; recompiling"),
            }
        }
        let component = match component {
            Some(c) => c,
            None => {
                let c = Component::new(engine, bytes)?;
                if let Some(p) = &path
                    && let Err(e) = write_atomically(p, &c.serialize()?)
                {
                    tracing::warn!(path = %p.display(), error = %e, "could not write the component cache; continuing without it");
                }
                c
            }
        };
        self.memory.lock().unwrap_or_else(|p| p.into_inner()).insert(key, component.clone());
        Ok((component, hit))
    }
}

fn write_atomically(path: &std::path::Path, bytes: &[u8]) -> std::io::Result<()> {
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}
