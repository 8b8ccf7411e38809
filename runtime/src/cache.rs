//! The component cache: compile once per process, and keep precompiled `.cwasm` files on disk
//! so a second launch does not recompile.
//!
//! The disk key is the BLAKE3 hash of the wasm bytes plus a hash of the engine's
//! `precompile_compatibility_hash`, so a `.cwasm` made by another wasmtime version or engine
//! configuration is never loaded. A `.cwasm` is native code that wasmtime runs as is, so each
//! file ends with a MAC of its name and contents (BLAKE3 in keyed mode) under a key that lives
//! in the cache folder (`cache.key`, `0600`, folder `0700`, never in any guest's scope): a file
//! whose MAC does not verify (swapped, torn, written by someone else) is recompiled and
//! replaced. Files are written to a temporary name and renamed, so a crash mid-write leaves no
//! torn file.
//!
//! Every launch hashes each artifact's wasm and verifies each `.cwasm` it loads, about 2 MB for
//! a driver and a tool. BLAKE3 does that in a fraction of SHA-256's time (BENCHMARKS.md,
//! "Thirtieth pass"); files named by the SHA-256 keys of earlier versions are not found under
//! the new names and are compiled again once.
//!
//! The folder does not grow without end: a load marks its file used, and a process that writes
//! a new file removes the ones unused for 30 days ([`crate::cache_prune`]).

use std::collections::HashMap;
use std::hash::{Hash, Hasher};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::beneath::{Beneath, FileMode};
use crate::cache_prune::{KEY_FILE, cwasm_name, temp_name};
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
    /// Missing from the cache, and being compiled on a thread of its own while the session
    /// runs (a tool, or a driver other than the primary: nothing calls one before the model
    /// asks for it or a switch names it). Its first call waits for the compile.
    Background,
}

/// Compiled components by content hash.
pub struct ComponentCache {
    dir: Option<PathBuf>,
    key: Option<[u8; 32]>,
    compat: String,
    memory: Mutex<HashMap<[u8; 32], Component>>,
}

impl ComponentCache {
    pub(crate) fn new(dir: Option<PathBuf>, engine: &Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        let key = dir.as_deref().and_then(|d| match cache_key(d) {
            Ok(k) => Some(k),
            Err(e) => {
                tracing::warn!(dir = %d.display(), error = %e, "component cache folder unusable; compiling in memory only");
                None
            }
        });
        let dir = if key.is_some() { dir } else { None };
        ComponentCache { dir, key, compat: format!("{:016x}", h.finish()), memory: Mutex::new(HashMap::new()) }
    }

    /// The cache folder, when on disk.
    pub fn dir(&self) -> Option<&PathBuf> {
        self.dir.as_ref()
    }

    /// The cache's key of `bytes`: their BLAKE3 hash.
    pub(crate) fn key_of(bytes: &[u8]) -> [u8; 32] {
        blake3::hash(bytes).into()
    }

    /// The component of content `key` when this process has it or a `.cwasm` on disk verifies;
    /// `None` when it must be compiled.
    pub(crate) fn lookup(&self, engine: &Engine, key: &[u8; 32]) -> wasmtime::Result<Option<(Component, CacheHit)>> {
        if let Some(c) = self.memory.lock().unwrap_or_else(|p| p.into_inner()).get(key) {
            return Ok(Some((c.clone(), CacheHit::Memory)));
        }
        let (Some(p), Some(k)) = (self.path_of(key).filter(|p| p.exists()), &self.key) else { return Ok(None) };
        let code = match read_verified(&p, k) {
            Ok(code) => code,
            Err(why) => {
                tracing::warn!(path = %p.display(), why, "ignoring a .cwasm that fails its integrity check; recompiling");
                return Ok(None);
            }
        };
        // SAFETY: `code` carries a valid MAC under this cache's private key, so it is exactly
        // what this cache wrote from `Component::serialize` of an engine with the same
        // compatibility hash (part of the file name).
        #[allow(unsafe_code)]
        match unsafe { Component::deserialize(engine, &code) } {
            Ok(c) => Ok(Some((self.keep(key, c)?, CacheHit::Disk))),
            Err(e) => {
                tracing::warn!(path = %p.display(), error = %e, "ignoring unreadable .cwasm; recompiling");
                Ok(None)
            }
        }
    }

    /// Compile `bytes` (of content `key`), write the `.cwasm` (a failure to write is logged:
    /// the cache works on in memory) and keep the component in this process.
    pub(crate) fn compile(&self, engine: &Engine, key: &[u8; 32], bytes: &[u8]) -> wasmtime::Result<Component> {
        let c = Component::new(engine, bytes)?;
        if let (Some(p), Some(k)) = (self.path_of(key), &self.key) {
            match write_atomically(&p, &sealed(c.serialize()?, k, &cache_file_name(&p))) {
                Ok(()) => self.prune(),
                Err(e) => {
                    tracing::warn!(path = %p.display(), error = %e, "could not write the component cache; continuing without it")
                }
            }
        }
        self.keep(key, c)
    }

    fn path_of(&self, key: &[u8; 32]) -> Option<PathBuf> {
        self.dir.as_ref().map(|d| d.join(cwasm_name(key, &self.compat)))
    }

    /// Keep a component just loaded or compiled for this process's later lookups.
    fn keep(&self, key: &[u8; 32], component: Component) -> wasmtime::Result<Component> {
        // The linear memories' copy-on-write images now, at load, rather than inside the first
        // call's instantiation (a memfd written and sealed per memory, on that call's turn).
        component.initialize_copy_on_write_image()?;
        self.memory.lock().unwrap_or_else(|p| p.into_inner()).insert(*key, component.clone());
        Ok(component)
    }

    /// After a write: remove what no launch has used for a long time (a failure is logged; the
    /// cache works on).
    fn prune(&self) {
        let Some(dir) = &self.dir else { return };
        match crate::cache_prune::prune(dir, std::time::SystemTime::now()) {
            Ok(removed) if !removed.is_empty() => {
                tracing::info!(dir = %dir.display(), removed = removed.len(), "removed component cache files unused for 30 days")
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(dir = %dir.display(), error = %e, "could not prune the component cache"),
        }
    }
}

const MAC_LEN: usize = 32;

/// The MAC binds the code to its file name (which holds the wasm's hash and the engine's), so
/// a valid file of another component swapped in under this name does not verify either.
fn mac_of(key: &[u8; 32], name: &str, code: &[u8]) -> blake3::Hash {
    let mut m = blake3::Hasher::new_keyed(key);
    m.update(name.as_bytes());
    m.update(&[0]);
    m.update(code);
    m.finalize()
}

/// The code followed by its MAC.
fn sealed(mut code: Vec<u8>, key: &[u8; 32], name: &str) -> Vec<u8> {
    let m = mac_of(key, name, &code);
    code.extend_from_slice(m.as_bytes());
    code
}

/// Read a cache file (never through a link, only one this user owns) and return its code when
/// its MAC verifies.
fn read_verified(path: &Path, key: &[u8; 32]) -> Result<Vec<u8>, &'static str> {
    let mut f = Beneath::file_at(path, FileMode::Read).map_err(|_| "not a regular file owned by this user")?;
    let mut bytes = Vec::new();
    f.read_to_end(&mut bytes).map_err(|_| "unreadable")?;
    if bytes.len() < MAC_LEN {
        return Err("too short to carry a MAC");
    }
    let tag = bytes.split_off(bytes.len() - MAC_LEN);
    let tag: [u8; MAC_LEN] = tag.try_into().map_err(|_| "too short to carry a MAC")?;
    let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
    // `blake3::Hash`'s equality takes the same time wherever the first difference is.
    if mac_of(key, name, &bytes) != blake3::Hash::from_bytes(tag) {
        return Err("MAC mismatch");
    }
    crate::cache_prune::freshen(&f, std::time::SystemTime::now());
    Ok(bytes)
}

/// The cache's private key: made once (32 random bytes, `0600`) in a `0700` folder.
fn cache_key(dir: &Path) -> std::io::Result<[u8; 32]> {
    let root = Beneath::create(dir).map_err(std::io::Error::other)?;
    if !root.exists(KEY_FILE) {
        let mut key = [0u8; 32];
        getrandom::fill(&mut key).map_err(|e| std::io::Error::other(e.to_string()))?;
        let tmp = temp_name(KEY_FILE);
        root.write(&tmp, &key).map_err(std::io::Error::other)?;
        // A concurrent first start may have won; all then read the winner's key.
        match rustix::fs::renameat_with(
            rustix::fs::CWD,
            dir.join(&tmp),
            rustix::fs::CWD,
            dir.join(KEY_FILE),
            rustix::fs::RenameFlags::NOREPLACE,
        ) {
            Ok(()) => {}
            Err(rustix::io::Errno::EXIST) => std::fs::remove_file(dir.join(&tmp))?,
            Err(e) => return Err(e.into()),
        }
    }
    let mut f = root.file(KEY_FILE, FileMode::Read).map_err(std::io::Error::other)?;
    let mut key = [0u8; 32];
    f.read_exact(&mut key)?;
    Ok(key)
}

fn cache_file_name(p: &Path) -> String {
    p.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string()
}

fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
        return Err(std::io::Error::other("no file name"));
    };
    let root = Beneath::open(parent).map_err(std::io::Error::other)?;
    let tmp = temp_name(name);
    root.write(&tmp, bytes).map_err(std::io::Error::other)?;
    std::fs::rename(parent.join(&tmp), path)
}
