//! Capsules in the cluster's object store, so that every host can run every capsule.
//!
//! A capsule is kept as its files, each an object named by the SHA-256 of its bytes (the same
//! hash the component cache is keyed by), and a **spec**: the list of `(path, sha256, size)`
//! and the manifest's path, stored as an object named `spec-<sha256 of the spec>`. A host that
//! never saw the capsule's folder fetches the spec and its files, checks every hash and path,
//! and writes them into a fresh folder of its own, named by the spec's hash.
//!
//! What the store holds is not trusted: a path must be relative with plain components only, a
//! file's bytes must hash to its name, and the sizes are bounded ([`MAX_FILES`],
//! [`MAX_BYTES`]). A capsule folder holding a symlink, a device or a fifo is refused when
//! submitted, rather than having what it points at uploaded.

use async_nats::jetstream::{self, object_store};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::path::{Component, Path, PathBuf};

use super::ClusterError;

/// The object store of capsule files and specs.
pub const FILES_BUCKET: &str = "CAPSULE_FILES";
/// Most files a capsule may have.
pub const MAX_FILES: usize = 4096;
/// Most bytes a capsule's files may have together.
pub const MAX_BYTES: u64 = 256 << 20;
/// Folders never taken into a capsule: version control and build output.
const SKIPPED: &[&str] = &[".git", "target", "capsule-work"];

/// One file of a capsule.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    /// Its path in the capsule folder (`/`-separated, relative).
    pub path: String,
    /// SHA-256 of its bytes, lowercase hex: its object's name.
    pub sha256: String,
    /// Its size.
    pub size: u64,
}

/// A capsule as the cluster keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CapsuleSpec {
    /// The manifest's path in the folder.
    pub manifest: String,
    /// Every file, sorted by path.
    pub files: Vec<FileRef>,
}

impl CapsuleSpec {
    /// The spec's own hash (of its JSON): its object is `spec-<hash>`.
    pub fn hash(&self) -> String {
        hex(&Sha256::digest(serde_json::to_vec(self).unwrap_or_default()))
    }
}

/// The cluster's capsule store.
#[derive(Clone)]
pub struct CapsuleFiles {
    store: object_store::ObjectStore,
    js: jetstream::Context,
}

impl std::fmt::Debug for CapsuleFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("CapsuleFiles")
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn bad(what: impl Into<String>, why: impl Into<String>) -> ClusterError {
    ClusterError::BadCapsule { what: what.into(), why: why.into() }
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> ClusterError + '_ {
    move |source| ClusterError::Files { path: path.to_path_buf(), source }
}

impl CapsuleFiles {
    /// Create the store (`replicas` copies), or take the one that exists.
    pub async fn open(js: &jetstream::Context, replicas: usize) -> Result<CapsuleFiles, ClusterError> {
        let store = super::log::patiently(|| async {
            match js.get_object_store(FILES_BUCKET).await {
                Ok(s) => Ok(s),
                Err(_) => js
                    .create_object_store(object_store::Config {
                        bucket: FILES_BUCKET.to_string(),
                        num_replicas: replicas,
                        storage: jetstream::stream::StorageType::File,
                        ..Default::default()
                    })
                    .await
                    .map_err(|e| ClusterError::js(format!("create the object store {FILES_BUCKET}"), e)),
            }
        })
        .await?;
        Ok(CapsuleFiles { store, js: js.clone() })
    }

    /// Keep the capsule whose manifest is `manifest` (a `murmur.yaml`, or the folder holding
    /// one): every file of its folder except `skip` (the host's own workdir) and the folders
    /// [`SKIPPED`]. Files already stored (same hash) are not sent again.
    pub async fn submit(&self, manifest: &Path, skip: &[PathBuf]) -> Result<CapsuleSpec, ClusterError> {
        let (folder, manifest_name) = if manifest.is_dir() {
            (manifest.to_path_buf(), "murmur.yaml".to_string())
        } else {
            let name = manifest.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            (manifest.parent().map(Path::to_path_buf).unwrap_or_default(), name)
        };
        let folder = std::fs::canonicalize(if folder.as_os_str().is_empty() { Path::new(".") } else { &folder })
            .map_err(io(&folder))?;
        let skip: Vec<PathBuf> = skip.iter().filter_map(|p| std::fs::canonicalize(p).ok()).collect();
        let mut files = Vec::new();
        let mut total = 0u64;
        let mut pending = vec![folder.clone()];
        while let Some(dir) = pending.pop() {
            for entry in std::fs::read_dir(&dir).map_err(io(&dir))? {
                let path = entry.map_err(io(&dir))?.path();
                let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
                let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                if meta.is_dir() {
                    if !SKIPPED.contains(&name.as_str()) && !skip.contains(&path) {
                        pending.push(path);
                    }
                    continue;
                }
                let rel = path.strip_prefix(&folder).unwrap_or(&path).to_string_lossy().into_owned();
                if !meta.is_file() {
                    return Err(bad(
                        rel,
                        "not a regular file (a symlink, device or fifo); the cluster keeps regular files only",
                    ));
                }
                let bytes = std::fs::read(&path).map_err(io(&path))?;
                total += bytes.len() as u64;
                if files.len() >= MAX_FILES || total > MAX_BYTES {
                    return Err(bad(
                        folder.display().to_string(),
                        format!(
                            "more than {MAX_FILES} files or {MAX_BYTES} bytes; move what the capsule does not need out of its folder"
                        ),
                    ));
                }
                let sha256 = hex(&Sha256::digest(&bytes));
                self.put_once(&sha256, &bytes).await?;
                files.push(FileRef { path: rel, sha256, size: bytes.len() as u64 });
            }
        }
        files.sort_by(|a, b| a.path.cmp(&b.path));
        if !files.iter().any(|f| f.path == manifest_name) {
            return Err(bad(folder.display().to_string(), format!("no {manifest_name} in the capsule folder")));
        }
        let spec = CapsuleSpec { manifest: manifest_name, files };
        let text = serde_json::to_vec(&spec).map_err(|e| bad("the capsule spec", e.to_string()))?;
        self.put_once(&format!("spec-{}", spec.hash()), &text).await?;
        Ok(spec)
    }

    async fn put_once(&self, name: &str, bytes: &[u8]) -> Result<(), ClusterError> {
        if self.store.info(name).await.is_ok() {
            return Ok(());
        }
        super::log::patiently(|| async move {
            let mut reader = bytes;
            self.store
                .put(name, &mut reader)
                .await
                .map(|_| ())
                .map_err(|e| ClusterError::js(format!("store {name}"), e))
        })
        .await
    }

    /// The bytes of object `name` (at most `limit`), tried again while JetStream does not
    /// answer. Its chunks are read one by one from the stream's leader by subject, as the
    /// journal is, rather than through a consumer: a consumer cannot always be made while the
    /// cluster elects a leader (and the client's object reader panics when it cannot).
    async fn get(&self, name: &str, limit: u64) -> Result<Vec<u8>, ClusterError> {
        super::log::patiently(|| self.get_once(name, limit)).await
    }

    async fn get_once(&self, name: &str, limit: u64) -> Result<Vec<u8>, ClusterError> {
        use jetstream::stream::LastRawMessageErrorKind as Kind;
        let info = self.store.info(name).await.map_err(|e| ClusterError::js(format!("find {name}"), e))?;
        if info.size as u64 > limit {
            return Err(bad(name, format!("larger than {limit} bytes")));
        }
        let stream = self
            .js
            .get_stream(format!("OBJ_{FILES_BUCKET}"))
            .await
            .map_err(|e| ClusterError::js("find the capsule store", e))?;
        let subject = format!("$O.{FILES_BUCKET}.C.{}", info.nuid);
        let (mut bytes, mut next) = (Vec::with_capacity(info.size), 1);
        for _ in 0..info.chunks {
            let m = match stream.get_first_raw_message_by_subject(&subject, next).await {
                Ok(m) => m,
                Err(e) if e.kind() == Kind::NoMessageFound => return Err(bad(name, "a chunk is missing")),
                Err(e) => return Err(ClusterError::js(format!("read {name}"), e)),
            };
            bytes.extend_from_slice(&m.payload);
            if bytes.len() as u64 > limit {
                return Err(bad(name, format!("larger than {limit} bytes")));
            }
            next = m.sequence + 1;
        }
        if bytes.len() != info.size {
            return Err(bad(name, format!("{} bytes where its record says {}", bytes.len(), info.size)));
        }
        Ok(bytes)
    }

    /// The spec whose hash is `hash`, checked: it must hash to its name, and every path must
    /// be relative with plain components only.
    pub async fn spec(&self, hash: &str) -> Result<CapsuleSpec, ClusterError> {
        let name = format!("spec-{hash}");
        let bytes = self.get(&name, 4 << 20).await?;
        let spec: CapsuleSpec = serde_json::from_slice(&bytes).map_err(|e| bad(&name, e.to_string()))?;
        if spec.hash() != hash {
            return Err(bad(&name, "its content does not hash to its name"));
        }
        let mut seen = std::collections::HashSet::new();
        for f in &spec.files {
            let plain =
                !f.path.is_empty() && Path::new(&f.path).components().all(|c| matches!(c, Component::Normal(_)));
            if !plain || !seen.insert(f.path.as_str()) {
                return Err(bad(&name, format!("the path `{}` is not a plain relative path, or is repeated", f.path)));
            }
        }
        if spec.files.len() > MAX_FILES || spec.files.iter().map(|f| f.size).sum::<u64>() > MAX_BYTES {
            return Err(bad(&name, format!("more than {MAX_FILES} files or {MAX_BYTES} bytes")));
        }
        Ok(spec)
    }

    /// The capsule `hash` as a folder under `root` (`<root>/<hash>`), fetched and written when
    /// this host does not have it yet; returns its manifest's path. Written into a fresh
    /// folder first and renamed into place whole, so a half-written capsule is never run.
    pub async fn materialize(&self, hash: &str, root: &Path) -> Result<PathBuf, ClusterError> {
        let spec = self.spec(hash).await?;
        let target = root.join(hash);
        if !target.is_dir() {
            std::fs::create_dir_all(root).map_err(io(root))?;
            let fresh = root.join(format!(".fetch-{}", uuid::Uuid::now_v7().simple()));
            std::fs::create_dir(&fresh).map_err(io(&fresh))?;
            for f in &spec.files {
                let bytes = self.get(&f.sha256, f.size).await?;
                if hex(&Sha256::digest(&bytes)) != f.sha256 {
                    return Err(bad(&f.sha256, "its content does not hash to its name"));
                }
                let path = fresh.join(&f.path);
                if let Some(parent) = path.parent() {
                    std::fs::create_dir_all(parent).map_err(io(parent))?;
                }
                let mut out =
                    std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(io(&path))?;
                std::io::Write::write_all(&mut out, &bytes).map_err(io(&path))?;
            }
            if let Err(e) = std::fs::rename(&fresh, &target) {
                // Another claim wrote it meanwhile: keep theirs.
                let _ = std::fs::remove_dir_all(&fresh);
                if !target.is_dir() {
                    return Err(io(&target)(e));
                }
            }
        }
        Ok(target.join(&spec.manifest))
    }
}
