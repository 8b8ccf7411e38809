//! Where an artifact's component comes from, besides a bare `.wasm`: an artifact folder (its
//! `module`, or Murmur's rule among its files) or an installed package (`crate::package`),
//! held to `murmur.lock`; and whether the component fits the role it is declared with.

use capsule_protocol::lockfile::{LOCK_FILE, Lock, LockEntry, LockHashes};
use capsule_protocol::manifest::{self, Artifact, ArtifactManifest, ArtifactRuntime, Manifest};
use capsule_protocol::{Code, Diagnostic};
use capsule_runtime::{Compile, ComponentKind, DiskMeter, LoadedArtifact};
use std::path::{Path, PathBuf};

use crate::error::LaunchError;
use crate::launch::{LaunchOptions, ReadyArtifact, grants_for, narrow};
use crate::package;

/// The component of an artifact folder: its `module` when named; else by Murmur's rule among
/// the files at the folder's top ([`component_name`]).
pub(crate) fn artifact_module(folder: &Path, own: &ArtifactManifest, own_path: &Path) -> Result<PathBuf, Diagnostic> {
    if let Some(m) = &own.module {
        return Ok(folder.join(m));
    }
    let mut tops: Vec<String> = std::fs::read_dir(folder)
        .map(|d| d.flatten().filter_map(|e| e.file_name().to_str().map(String::from)).collect())
        .unwrap_or_default();
    tops.sort();
    Ok(folder.join(component_name(own, &tops, own_path)?))
}

/// Which file is the component, by Murmur's rule: the `.wasm` at the top that `requires_files`
/// lists (else any at the top, `tops`), `capsule.wasm` among several.
fn component_name(own: &ArtifactManifest, tops: &[String], origin: &Path) -> Result<String, Diagnostic> {
    if let Some(m) = &own.module {
        return Ok(m.clone());
    }
    let top_wasm = |name: &str| !name.contains('/') && name.ends_with(".wasm");
    let listed: Vec<String> = own.requires_files.iter().filter(|f| top_wasm(f)).cloned().collect();
    let found: Vec<String> =
        if listed.is_empty() { tops.iter().filter(|n| top_wasm(n)).cloned().collect() } else { listed };
    match found.as_slice() {
        [one] => Ok(one.clone()),
        many if many.iter().any(|n| n == "capsule.wasm") => Ok("capsule.wasm".to_string()),
        [] => Err(Diagnostic::new(
            Code::ArtifactSourceMissing,
            origin.display().to_string(),
            format!("artifact `{}` names no component: no `module`, and no .wasm at the top", own.name),
            "list the component in requires_files (e.g. `requires_files: [tool.wasm]`) and put it beside murmur.yaml",
        )),
        many => Err(Diagnostic::new(
            Code::ArtifactManifest,
            origin.display().to_string(),
            format!("artifact `{}` has several components ({}) and none is capsule.wasm", own.name, many.join(", ")),
            "list only the component in requires_files, or name it `capsule.wasm`",
        )),
    }
}

/// `murmur.lock` beside the manifest, when there is one.
pub(crate) fn read_lock(dir: &Path) -> Result<Option<Lock>, LaunchError> {
    let path = dir.join(LOCK_FILE);
    match std::fs::read_to_string(&path) {
        Ok(text) => Lock::parse(&text).map(Some).map_err(|e| {
            Diagnostic::new(
                Code::ArtifactIntegrity,
                path.display().to_string(),
                e.to_string(),
                "fix the file, or delete it so the next launch writes it from what is installed",
            )
            .into()
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LaunchError::Io { path, source }),
    }
}

/// An artifact named by name and version: its installed package (the lock's version when
/// there is a lock, checked against the lock's hash), its manifest and its component.
#[allow(clippy::too_many_arguments, reason = "the launch context, passed as the folder path does")]
pub(crate) fn from_package(
    decl: &Artifact,
    m: &Manifest,
    stores: &[PathBuf],
    lock: Option<&Lock>,
    opts: &LaunchOptions,
    session_id: &str,
    meters: (&Path, &DiskMeter),
    warnings: &mut Vec<Diagnostic>,
) -> Result<(ReadyArtifact, LockEntry), LaunchError> {
    let entry = lock.map(|l| l.entry(&decl.name));
    let version = match entry {
        Some(Some(e)) => e.resolved_version.clone(),
        Some(None) => {
            return Err(Diagnostic::new(
                Code::ArtifactIntegrity,
                LOCK_FILE,
                format!("murmur.lock has no entry for artifact `{}`", decl.name),
                "delete murmur.lock so the next launch writes it from what is installed",
            )
            .into());
        }
        None => decl.version.clone().unwrap_or_default(),
    };
    let pkg = package::resolve(stores, &decl.name, &version)?;
    if let Some(Some(e)) = entry
        && e.sha256.wasm != pkg.sha256
    {
        return Err(package::PackageError::Integrity {
            path: pkg.path.clone(),
            what: format!("its SHA-256 is {}, but murmur.lock pins {}", pkg.sha256, e.sha256.wasm),
        }
        .into());
    }
    let origin = format!("{}: murmur.yaml", pkg.path.display());
    let (own, own_warnings) = manifest::parse_artifact_manifest(&pkg.manifest_text()?, &origin)?;
    warnings.extend(own_warnings);
    if own.runtime != decl.runtime {
        return Err(Diagnostic::new(
            Code::ArtifactManifest,
            origin,
            format!(
                "artifact `{}` is declared `{:?}` but its package says `{:?}`",
                decl.name, decl.runtime, own.runtime
            ),
            "make the two runtimes agree",
        )
        .into());
    }
    let name = component_name(&own.manifest, &pkg.top_names(), &pkg.path)?;
    let bytes = pkg.entry(&name).ok_or_else(|| {
        Diagnostic::new(
            Code::ArtifactSourceMissing,
            origin.clone(),
            format!("the package has no `{name}`"),
            "rebuild the package with its component",
        )
    })?;
    let loaded = LoadedArtifact::load_bytes_with(
        &opts.host,
        &decl.name,
        &pkg.path.join(&name),
        bytes,
        component_kind(decl.runtime),
        compile_when(decl, m),
    )?;
    role_fits(decl, &loaded)?;
    let at = format!("artifacts[{}].capabilities", decl.name);
    let caps = narrow(&narrow(&m.capabilities, decl.capabilities.as_ref(), &at)?, own.grants.as_ref(), &at)?;
    let grants = grants_for(m, decl, &caps, opts, session_id, meters)?;
    let entry =
        LockEntry { name: decl.name.clone(), resolved_version: version, sha256: LockHashes { wasm: pkg.sha256 } };
    Ok((ReadyArtifact { decl: decl.clone(), own: Some(own), loaded, grants }, entry))
}

/// Write `murmur.lock` for the artifacts resolved from packages, when there was none: Murmur
/// writes it on the first run that resolves installed artifacts and never rewrites one. A lock
/// that cannot be written is a warning, not a refusal.
pub(crate) fn write_lock(dir: &Path, locked: Vec<LockEntry>, warnings: &mut Vec<Diagnostic>) {
    if locked.is_empty() {
        return;
    }
    let path = dir.join(LOCK_FILE);
    let text = Lock { lock_version: 1, artifacts: locked }.render();
    if let Err(e) = package::write_atomic(&path, text.as_bytes()) {
        warnings.push(Diagnostic::new(
            Code::LockNotWritten,
            path.display().to_string(),
            format!("murmur.lock could not be written: {e}"),
            "make the capsule folder writable; until then installed artifacts are not pinned",
        ));
    }
}

/// Refuse a component whose imports rule out the role it is declared with: a driver importing
/// the tool-only `murmur:task/task`, or a tool importing the driver-only `murmur:text/chunks`.
/// (Both worlds export the same `run`; a component that imports neither is taken at its word.)
pub(crate) fn role_fits(decl: &Artifact, loaded: &LoadedArtifact) -> Result<(), Diagnostic> {
    let imports = |prefix: &str| loaded.murmur_imports.iter().find(|i| i.starts_with(prefix));
    let wrong = match decl.runtime {
        ArtifactRuntime::Driver => imports("murmur:task/task").map(|i| (i, "a driver", "a tool")),
        ArtifactRuntime::Tool => imports("murmur:text/chunks").map(|i| (i, "a tool", "a (legacy) driver")),
        // Loaded against the hook world: its export and imports were checked there.
        ArtifactRuntime::Hook => None,
    };
    match wrong {
        None => Ok(()),
        Some((interface, declared, is)) => Err(Diagnostic::new(
            Code::ArtifactWrongRole,
            format!("artifacts[{}].runtime", decl.name),
            format!(
                "artifact `{}` is declared {declared}, but its component imports `{interface}`, so it is {is}",
                decl.name
            ),
            "declare it with the runtime it was built for, or name the right component in `source:`",
        )),
    }
}

/// When `decl` is compiled if the cache lacks it: the primary driver and hooks before the
/// session starts (the first turn needs them); tools and the other drivers in the background
/// (nothing needs a tool before the model asks for it, nor another driver before a switch to
/// it), their first call waiting for the compile.
pub(crate) fn compile_when(decl: &Artifact, m: &Manifest) -> Compile {
    match decl.runtime {
        ArtifactRuntime::Driver if decl.name == m.inference.driver.artifact => Compile::Now,
        ArtifactRuntime::Hook => Compile::Now,
        ArtifactRuntime::Driver | ArtifactRuntime::Tool => Compile::Background,
    }
}

/// The world an artifact declared with `runtime` is loaded against.
pub(crate) fn component_kind(runtime: ArtifactRuntime) -> ComponentKind {
    match runtime {
        ArtifactRuntime::Hook => ComponentKind::Hook,
        ArtifactRuntime::Driver | ArtifactRuntime::Tool => ComponentKind::Run,
    }
}
