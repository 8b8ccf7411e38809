//! Installed Murmur artifact packages: a `.mur.zip` (the artifact's `murmur.yaml` and its
//! `requires_files`) in a store, beside a `.sha256` of the whole file, as `mur install` lays
//! them out:
//!
//! ```text
//! <capsule folder>/.murmur/artifacts/<name>/<version>/<name>-<version>.mur.zip   project store
//!                                                    /<name>-<version>.sha256    bare hex
//! ~/.murmur/artifacts/…                                                          global store
//! ```
//!
//! A package is read whole into memory and never unpacked: its entries are checked (no
//! absolute path, no `..`, at most [`MAX_ENTRY_BYTES`] each), its manifest read, and its
//! component compiled from the bytes. There is no network registry: an artifact that is in
//! neither store is refused, saying how to install one ([`install`]).

use capsule_protocol::Code;
use sha2::{Digest, Sha256};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// The largest entry a package may hold, decompressed (Murmur's default).
pub const MAX_ENTRY_BYTES: u64 = 500 * 1024 * 1024;

/// Why a package could not be used or installed.
#[derive(Debug, thiserror::Error)]
pub enum PackageError {
    /// In neither store.
    #[error(
        "{code}: artifact `{name}@{version}` is not installed (looked in {looked}); this runtime has no network registry (fix: install its package with `capsule install <file.mur.zip or artifact folder>`, or give the artifact a `source`)",
        code = Code::ArtifactNotInstalled, looked = looked.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" and ")
    )]
    NotInstalled {
        /// The artifact.
        name: String,
        /// The version asked for.
        version: String,
        /// The folders looked in.
        looked: Vec<PathBuf>,
    },
    /// A file could not be read or written.
    #[error("{code}: {path}: {source}", code = Code::SessionIo)]
    Io {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The package, its checksum and the lock disagree.
    #[error("{code}: {path}: {what} (fix: reinstall the package with `capsule install`, or delete murmur.lock to lock what is installed)", code = Code::ArtifactIntegrity)]
    Integrity {
        /// The package.
        path: PathBuf,
        /// What disagrees.
        what: String,
    },
    /// Not a zip, an entry that would escape, or one too large.
    #[error("{code}: {path}: {what} (fix: rebuild the package from its artifact folder)", code = Code::ArtifactPackageUnsafe)]
    Unsafe {
        /// The package.
        path: PathBuf,
        /// What is wrong.
        what: String,
    },
    /// Its manifest was refused.
    #[error("{0}")]
    Manifest(capsule_protocol::Diagnostics),
}

impl PackageError {
    /// Its diagnostic code.
    pub fn code(&self) -> Code {
        match self {
            PackageError::NotInstalled { .. } => Code::ArtifactNotInstalled,
            PackageError::Io { .. } => Code::SessionIo,
            PackageError::Integrity { .. } => Code::ArtifactIntegrity,
            PackageError::Unsafe { .. } => Code::ArtifactPackageUnsafe,
            PackageError::Manifest(d) => d.0.first().map(|d| d.code).unwrap_or(Code::ArtifactManifest),
        }
    }
}

/// A package read and checked.
#[derive(Debug, Clone)]
pub struct Package {
    /// Where it is.
    pub path: PathBuf,
    /// Lowercase hex SHA-256 of the whole file.
    pub sha256: String,
    /// Its entries, by name.
    pub entries: Vec<(String, Vec<u8>)>,
}

impl Package {
    /// An entry's bytes.
    pub fn entry(&self, name: &str) -> Option<&[u8]> {
        self.entries.iter().find(|(n, _)| n == name).map(|(_, b)| b.as_slice())
    }

    /// Its `murmur.yaml`.
    pub fn manifest_text(&self) -> Result<String, PackageError> {
        let bytes = self.entry("murmur.yaml").ok_or_else(|| PackageError::Unsafe {
            path: self.path.clone(),
            what: "the package has no murmur.yaml at its top".into(),
        })?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| PackageError::Unsafe { path: self.path.clone(), what: "murmur.yaml is not UTF-8".into() })
    }

    /// The names at the package's top, for Murmur's rule of which `.wasm` is the component.
    pub fn top_names(&self) -> Vec<String> {
        self.entries.iter().map(|(n, _)| n.clone()).filter(|n| !n.contains('/')).collect()
    }
}

fn hex_sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Read a package's bytes: every entry checked and loaded.
pub fn read(path: &Path, bytes: &[u8]) -> Result<Package, PackageError> {
    let unsafe_ = |what: String| PackageError::Unsafe { path: path.to_path_buf(), what };
    let mut zip = zip::ZipArchive::new(std::io::Cursor::new(bytes)).map_err(|e| unsafe_(format!("not a zip: {e}")))?;
    let mut entries = Vec::new();
    for i in 0..zip.len() {
        let mut f = zip.by_index(i).map_err(|e| unsafe_(format!("entry {i} cannot be read: {e}")))?;
        let name = f.name().map_err(|e| unsafe_(format!("entry {i} has no readable name: {e}")))?.to_string();
        let p = Path::new(&name);
        let escapes = name.is_empty()
            || name.starts_with('/')
            || name.contains('\\')
            || p.components().any(|c| !matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
        if escapes {
            return Err(unsafe_(format!("entry `{name}` is not a plain relative path (absolute, `..` or a drive)")));
        }
        if f.is_dir() {
            continue;
        }
        if f.size() > MAX_ENTRY_BYTES {
            return Err(unsafe_(format!("entry `{name}` is {} bytes; at most {MAX_ENTRY_BYTES}", f.size())));
        }
        let mut out = Vec::new();
        // The declared size can lie: read at most one byte past the limit.
        (&mut f)
            .take(MAX_ENTRY_BYTES + 1)
            .read_to_end(&mut out)
            .map_err(|e| unsafe_(format!("entry `{name}`: {e}")))?;
        if out.len() as u64 > MAX_ENTRY_BYTES {
            return Err(unsafe_(format!("entry `{name}` is over {MAX_ENTRY_BYTES} bytes")));
        }
        entries.push((name.trim_start_matches("./").to_string(), out));
    }
    Ok(Package { path: path.to_path_buf(), sha256: hex_sha256(bytes), entries })
}

/// The stores looked in, in order: the capsule folder's, then the user's.
pub fn stores(capsule_dir: &Path, home: Option<&Path>) -> Vec<PathBuf> {
    let mut v = vec![capsule_dir.join(".murmur").join("artifacts")];
    if let Some(h) = home {
        v.push(h.join(".murmur").join("artifacts"));
    }
    v
}

fn file_name(name: &str, version: &str, ext: &str) -> String {
    format!("{name}-{version}.{ext}")
}

/// Find `name@version` in the stores, check it against its `.sha256`, and read it.
pub fn resolve(stores: &[PathBuf], name: &str, version: &str) -> Result<Package, PackageError> {
    let safe = |s: &str| !s.is_empty() && !s.contains(['/', '\\']) && s != "." && s != "..";
    if !(safe(name) && safe(version)) {
        return Err(PackageError::NotInstalled { name: name.into(), version: version.into(), looked: stores.to_vec() });
    }
    for store in stores {
        let dir = store.join(name).join(version);
        let path = dir.join(file_name(name, version, "mur.zip"));
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
            Err(source) => return Err(PackageError::Io { path, source }),
        };
        let sum_path = dir.join(file_name(name, version, "sha256"));
        let expected =
            std::fs::read_to_string(&sum_path).map_err(|source| PackageError::Io { path: sum_path, source })?;
        let expected = expected.trim().to_ascii_lowercase();
        // The checksum first: a changed package is an integrity refusal, whatever it now holds.
        let actual = hex_sha256(&bytes);
        if expected != actual {
            return Err(PackageError::Integrity {
                path,
                what: format!("its SHA-256 is {actual}, but its .sha256 file says {expected}"),
            });
        }
        return read(&path, &bytes);
    }
    Err(PackageError::NotInstalled { name: name.into(), version: version.into(), looked: stores.to_vec() })
}

/// A package's bytes built from an artifact folder: `murmur.yaml` first, then each
/// `requires_files` entry (and a `module` inside the folder), deflated, in that order.
pub fn build(folder: &Path) -> Result<Vec<u8>, PackageError> {
    let io = |path: PathBuf| move |source| PackageError::Io { path, source };
    let manifest_path = folder.join("murmur.yaml");
    let text = std::fs::read_to_string(&manifest_path).map_err(io(manifest_path.clone()))?;
    let (own, _) = capsule_protocol::manifest::parse_artifact_manifest(&text, &manifest_path.display().to_string())
        .map_err(PackageError::Manifest)?;
    let mut files: Vec<String> = own.manifest.requires_files.clone();
    if let Some(m) = &own.manifest.module
        && !files.contains(m)
    {
        files.push(m.clone());
    }
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated)
        .last_modified_time(zip::DateTime::default());
    let zip_err = |e: zip::result::ZipError| PackageError::Unsafe { path: folder.to_path_buf(), what: e.to_string() };
    out.start_file("murmur.yaml", opts).map_err(zip_err)?;
    out.write_all(text.as_bytes()).map_err(io(manifest_path))?;
    for f in files {
        let p = Path::new(&f);
        if p.is_absolute() || p.components().any(|c| matches!(c, std::path::Component::ParentDir)) {
            return Err(PackageError::Unsafe {
                path: folder.to_path_buf(),
                what: format!("`{f}` is outside the artifact folder; a package holds only files inside it"),
            });
        }
        let path = folder.join(p);
        let bytes = std::fs::read(&path).map_err(io(path.clone()))?;
        out.start_file(f.trim_start_matches("./"), opts).map_err(zip_err)?;
        out.write_all(&bytes).map_err(io(path))?;
    }
    Ok(out.finish().map_err(zip_err)?.into_inner())
}

/// Write a file through a temporary beside it, then rename (never a half-written file).
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
    {
        let mut f = std::fs::File::create(&tmp)?;
        f.write_all(bytes)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)
}

/// What [`install`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Installed {
    /// The artifact's name.
    pub name: String,
    /// Its version.
    pub version: String,
    /// The package file written.
    pub path: PathBuf,
    /// Its SHA-256.
    pub sha256: String,
}

/// Install a package's bytes into `store` (`<store>/<name>/<version>/…`): read and checked
/// first, name and version from its manifest.
pub fn install(store: &Path, origin: &Path, bytes: &[u8]) -> Result<Installed, PackageError> {
    let package = read(origin, bytes)?;
    let text = package.manifest_text()?;
    let (own, _) =
        capsule_protocol::manifest::parse_artifact_manifest(&text, &format!("{}: murmur.yaml", origin.display()))
            .map_err(PackageError::Manifest)?;
    let name = own.manifest.name.clone();
    let version = own.manifest.version.clone().ok_or_else(|| PackageError::Unsafe {
        path: origin.to_path_buf(),
        what: "its murmur.yaml has no `version`; an installed artifact is found by name and version".into(),
    })?;
    let safe = |s: &str| !s.is_empty() && !s.contains(['/', '\\']) && s != "." && s != "..";
    if !(safe(&name) && safe(&version)) {
        return Err(PackageError::Unsafe {
            path: origin.to_path_buf(),
            what: format!("`{name}@{version}` cannot name a folder (empty, `.`, `..` or a slash)"),
        });
    }
    let dir = store.join(&name).join(&version);
    std::fs::create_dir_all(&dir).map_err(|source| PackageError::Io { path: dir.clone(), source })?;
    let path = dir.join(file_name(&name, &version, "mur.zip"));
    write_atomic(&path, bytes).map_err(|source| PackageError::Io { path: path.clone(), source })?;
    let sum = dir.join(file_name(&name, &version, "sha256"));
    write_atomic(&sum, package.sha256.as_bytes()).map_err(|source| PackageError::Io { path: sum, source })?;
    Ok(Installed { name, version, path, sha256: package.sha256 })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
        let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
        for (n, b) in entries {
            w.start_file(*n, zip::write::SimpleFileOptions::default()).expect("entry");
            w.write_all(b).expect("bytes");
        }
        w.finish().expect("zip").into_inner()
    }

    #[test]
    fn entries_that_would_escape_are_refused_and_a_plain_package_reads() {
        for bad in ["../evil.wasm", "/abs.wasm", "a/../../b", "c:\\x.wasm"] {
            let bytes = zip_of(&[("murmur.yaml", b"name: a"), (bad, b"x")]);
            let e = read(Path::new("p.mur.zip"), &bytes).expect_err("refused");
            assert!(e.to_string().starts_with("E-CAP-011"), "{bad}: {e}");
        }
        let ok =
            read(Path::new("p.mur.zip"), &zip_of(&[("murmur.yaml", b"name: a"), ("t.wasm", b"w")])).expect("reads");
        assert_eq!(ok.top_names(), ["murmur.yaml", "t.wasm"]);
        assert!(read(Path::new("p"), b"not a zip").expect_err("refused").to_string().contains("not a zip"));
    }

    #[test]
    fn an_installed_package_resolves_and_a_changed_byte_is_an_integrity_refusal() {
        let dir = tempfile::tempdir().expect("tempdir");
        let store = dir.path().join("store");
        let bytes = zip_of(&[("murmur.yaml", b"name: t\nversion: '1.0'\nruntime: tool\n"), ("t.wasm", b"w")]);
        let done = install(&store, Path::new("t.mur.zip"), &bytes).expect("installed");
        assert_eq!((done.name.as_str(), done.version.as_str()), ("t", "1.0"));
        let p = resolve(std::slice::from_ref(&store), "t", "1.0").expect("resolves");
        assert_eq!(p.sha256, done.sha256);
        let mut changed = bytes.clone();
        let last = changed.len() - 1;
        changed[last] ^= 1;
        std::fs::write(&done.path, changed).expect("tamper");
        let e = resolve(std::slice::from_ref(&store), "t", "1.0").expect_err("refused");
        assert!(e.to_string().starts_with("E-CAP-010"), "{e}");
        let e = resolve(std::slice::from_ref(&store), "t", "2.0").expect_err("refused");
        assert!(e.to_string().contains("no network registry"), "{e}");
    }
}
