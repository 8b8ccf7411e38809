//! Launching a session: read and validate the manifest, resolve and load every artifact,
//! resolve credentials, build each artifact's grants, create the session folder, and start the
//! supervision tree. Everything that can be refused is refused here, before anything runs,
//! with a coded error.

use capsule_protocol::manifest::{self, Artifact, ArtifactRuntime, Capabilities, CheckedArtifact, Limits, Manifest};
use capsule_protocol::neutral::ToolSpec;
use capsule_protocol::{Code, Diagnostic};
use capsule_runtime::{
    ArtifactRole, Beneath, Compile, DiskMeter, Grants, Host, LoadedArtifact, OutgoingPolicy, Scope, gateway_address,
};
use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::artifact_source::{
    artifact_module, compile_when, component_kind, from_package, read_lock, role_fits, write_lock,
};
use crate::credentials::{CredentialSource, DriverCredential, Sources};
use crate::error::LaunchError;
use crate::package;
use capsule_runtime::KeyStyle;

/// What a session is launched with.
#[derive(Clone)]
pub struct LaunchOptions {
    /// `murmur.yaml`, or the folder holding it.
    pub manifest: PathBuf,
    /// The capsule's folder: its session folders and `files/`, the tools' workdir (created
    /// `0700`).
    pub workdir: PathBuf,
    /// The sandbox host (one per process).
    pub host: Host,
    /// The environment snapshot (read once at launch).
    pub env: HashMap<String, String>,
    /// The host config and the file it came from (credentials re-read from it on use).
    pub host_config: Option<(capsule_protocol::host_config::HostConfig, PathBuf)>,
    /// The host-wide spend meter (`spend.machine_tokens_per_day`), shared by every session of
    /// the process.
    pub machine: Option<ractor::ActorRef<crate::spend::machine::MachineMsg>>,
    /// Sends the primary driver's traffic to another endpoint (`capsule run --endpoint`,
    /// `capsule demo`); with `keyless` the credential is dropped, else the manifest's is kept.
    pub endpoint_override: Option<EndpointOverride>,
    /// Run the session in a cluster: its lease taken and kept by this host, its conversation
    /// and trace journaled to JetStream. `None`: local files only.
    pub cluster: Option<crate::cluster::ClusterHost>,
}

/// A replacement endpoint for the primary driver.
#[derive(Debug, Clone)]
pub struct EndpointOverride {
    /// The endpoint.
    pub endpoint: String,
    /// Drop the credential.
    pub keyless: bool,
}

/// One artifact ready to run.
pub struct ReadyArtifact {
    /// Its declaration.
    pub decl: Artifact,
    /// Its folder manifest, checked, when the source was a folder.
    pub own: Option<CheckedArtifact>,
    /// The loaded component.
    pub loaded: LoadedArtifact,
    /// Its grants.
    pub grants: Grants,
}

/// A manifest with everything it names loaded.
pub struct Prepared {
    /// The manifest.
    pub manifest: Manifest,
    /// Load-time warnings.
    pub warnings: Vec<Diagnostic>,
    /// Artifacts by declaration order.
    pub artifacts: Vec<ReadyArtifact>,
    /// The system prompt.
    pub system: String,
    /// `inference.compaction.system_prompt` (or its file's text).
    pub compaction_prompt: Option<String>,
    /// Resolved driver credentials.
    pub credentials: HashMap<String, DriverCredential>,
    /// The capsule's folder (`--workdir`), absolute: session folders and [`FILES_DIR`].
    pub workdir: PathBuf,
    /// The tools' workdir (`<workdir>/files`): every tool's scope lies beneath it, and no
    /// session file does.
    pub files: PathBuf,
}

/// The folder, inside the capsule's folder, that is the tools' workdir. Session folders are
/// its siblings, so no scope can reach them (CONTRACT §9).
pub const FILES_DIR: &str = "files";

/// Find `murmur.yaml` for a path that is the file or its folder.
pub fn manifest_path(p: &Path) -> PathBuf {
    if p.is_dir() { p.join("murmur.yaml") } else { p.to_path_buf() }
}

pub(crate) fn narrow(capsule: &Capabilities, own: Option<&Capabilities>, at: &str) -> Result<Capabilities, Diagnostic> {
    let Some(own) = own else { return Ok(capsule.clone()) };
    let mut c = capsule.clone();
    c.network.allow.retain(|e| own.network.allow.contains(e));
    c.env.allow.retain(|e| own.env.allow.contains(e));
    // Both scopes passed `scope_parts` at parse time, so joining their parts can only name a
    // folder at or below the capsule's scope.
    let refuse = |scope: &str, why: &str| {
        Diagnostic::new(
            Code::ManifestCapability,
            format!("{at}.filesystem.scope"),
            format!("`{scope}` {why}"),
            "use a plain folder relative to the workdir, e.g. `.` or `data/in`",
        )
    };
    let mut parts =
        manifest::scope_parts(&capsule.filesystem.scope).map_err(|w| refuse(&capsule.filesystem.scope, w))?;
    parts.extend(manifest::scope_parts(&own.filesystem.scope).map_err(|w| refuse(&own.filesystem.scope, w))?);
    c.filesystem.scope = if parts.is_empty() { ".".into() } else { parts.join("/") };
    let (a, b) = (c.limits, own.limits);
    c.limits = Limits {
        memory_bytes: a.memory_bytes.min(b.memory_bytes),
        deadline_seconds: a.deadline_seconds.min(b.deadline_seconds),
        table_elements: a.table_elements.min(b.table_elements),
        instances: a.instances.min(b.instances),
        resources: a.resources.min(b.resources),
        output_bytes: a.output_bytes.min(b.output_bytes),
        disk_bytes: a.disk_bytes.min(b.disk_bytes),
        response_bytes: a.response_bytes.min(b.response_bytes),
    };
    Ok(c)
}

/// A driver's kind, from what its declaration names (the artifact's name, its folder
/// manifest's name, its component's file name): it says how the key goes upstream when the
/// artifact declares no `upstream_auth`.
fn driver_kind(decl: &Artifact, own: Option<&CheckedArtifact>) -> KeyStyle {
    let names = [Some(decl.name.as_str()), own.map(|o| o.manifest.name.as_str()), decl.source.as_deref()];
    let says = |kind: &str| names.iter().flatten().any(|n| n.to_ascii_lowercase().contains(kind));
    match (says("anthropic"), says("openai")) {
        (true, false) => KeyStyle::Anthropic,
        (false, true) => KeyStyle::OpenAi,
        _ => KeyStyle::ByPath,
    }
}

/// Read, validate and load. `session_id` and `workdir` go into each artifact's environment and
/// grants.
pub fn prepare(opts: &LaunchOptions, session_id: &str) -> Result<Prepared, LaunchError> {
    // Folders this launch creates and would leave empty behind a refusal: deepest first.
    let mut created = vec![opts.workdir.join(FILES_DIR)];
    let mut p = Some(opts.workdir.as_path());
    while let Some(dir) = p.filter(|d| !d.as_os_str().is_empty() && !d.exists()) {
        created.push(dir.to_path_buf());
        p = dir.parent();
    }
    let prepared = prepare_in(opts, session_id);
    if prepared.is_err() && created.len() > 1 {
        // `remove_dir` removes only empty folders: nothing written is ever lost.
        for dir in &created {
            let _ = std::fs::remove_dir(dir);
        }
    }
    prepared
}

fn prepare_in(opts: &LaunchOptions, session_id: &str) -> Result<Prepared, LaunchError> {
    let mut opts = opts.clone();
    Beneath::create(&opts.workdir).map_err(LaunchError::Files)?;
    opts.workdir = std::fs::canonicalize(&opts.workdir)
        .map_err(|source| LaunchError::Io { path: opts.workdir.clone(), source })?;
    let files = Beneath::open(&opts.workdir).and_then(|w| w.into_dir(FILES_DIR, true)).map_err(LaunchError::Files)?;
    let files = files.path().to_path_buf();
    let disk = DiskMeter::default();
    let opts = &opts;
    let path = manifest_path(&opts.manifest);
    let origin = path.display().to_string();
    let text = std::fs::read_to_string(&path).map_err(|e| {
        Diagnostic::new(
            Code::ManifestMissing,
            &origin,
            format!("cannot read the manifest: {e}"),
            "pass a capsule folder holding murmur.yaml, or the path of a murmur.yaml",
        )
    })?;
    let (mut m, mut warnings) = manifest::parse(&text, &origin)?;
    if let Some(o) = &opts.endpoint_override {
        let refused = manifest::endpoint_override_rules(&o.endpoint);
        if refused.has_errors() {
            return Err(refused.into());
        }
        let api_key = if o.keyless { None } else { m.primary_gateway().and_then(|g| g.api_key) };
        let g = manifest::Gateway { endpoint: o.endpoint.clone(), keyless: api_key.is_none(), api_key };
        m.inference.endpoint = None;
        m.inference.api_key = None;
        let primary = m.inference.driver.artifact.clone();
        if let Some(a) = m.artifacts.iter_mut().find(|a| a.name == primary) {
            a.gateway = Some(g);
        }
    }
    let dir = path.parent().map(Path::to_path_buf).unwrap_or_else(|| PathBuf::from("."));

    let system = match (&m.inference.system_prompt, &m.inference.system_prompt_file) {
        (Some(s), _) => s.clone(),
        (None, Some(f)) => std::fs::read_to_string(dir.join(f)).map_err(|e| {
            Diagnostic::new(
                Code::ManifestInvalid,
                "inference.system_prompt_file",
                format!("cannot read `{f}`: {e}"),
                "point system_prompt_file at a readable file relative to the manifest",
            )
        })?,
        (None, None) => String::new(),
    };
    let c = &m.inference.compaction;
    let compaction_prompt = match (&c.system_prompt, &c.system_prompt_file) {
        (Some(s), _) => Some(s.clone()),
        (None, Some(f)) => Some(std::fs::read_to_string(dir.join(f)).map_err(|e| {
            Diagnostic::new(
                Code::ManifestInvalid,
                "inference.compaction.system_prompt_file",
                format!("cannot read `{f}`: {e}"),
                "point system_prompt_file at a readable file relative to the manifest",
            )
        })?),
        (None, None) => None,
    };

    let lock = read_lock(&dir)?;
    let stores = package::stores(&dir, opts.env.get("HOME").map(Path::new));
    let mut locked = Vec::new();
    let mut artifacts = Vec::new();
    // What is compiled in the background last: started after the compiles the first turn
    // waits for, it does not slow them. Kept in declaration order after.
    let mut order: Vec<usize> = (0..m.artifacts.len()).collect();
    order.sort_by_key(|&i| compile_when(&m.artifacts[i], &m) == Compile::Background);
    for i in order {
        let decl = &m.artifacts[i];
        let Some(source) = decl.source.as_deref() else {
            let (ready, entry) =
                from_package(decl, &m, &stores, lock.as_ref(), opts, session_id, (&files, &disk), &mut warnings)?;
            artifacts.push((i, ready));
            locked.push((i, entry));
            continue;
        };
        let src = dir.join(source);
        let (module, own) = if src.is_dir() {
            let own_path = src.join("murmur.yaml");
            let own_text = std::fs::read_to_string(&own_path).map_err(|e| {
                Diagnostic::new(
                    Code::ArtifactSourceMissing,
                    own_path.display().to_string(),
                    format!("artifact `{}` is a folder without a readable murmur.yaml: {e}", decl.name),
                    "add the artifact's murmur.yaml naming its module, or point source at the .wasm file",
                )
            })?;
            let (own, own_warnings) = manifest::parse_artifact_manifest(&own_text, &own_path.display().to_string())?;
            warnings.extend(own_warnings);
            if own.runtime != decl.runtime {
                return Err(Diagnostic::new(
                    Code::ArtifactManifest,
                    own_path.display().to_string(),
                    format!(
                        "artifact `{}` is declared `{:?}` but its own manifest says `{:?}`",
                        decl.name, decl.runtime, own.runtime
                    ),
                    "make the two runtimes agree",
                )
                .into());
            }
            (artifact_module(&src, &own.manifest, &own_path)?, Some(own))
        } else {
            (src, None)
        };
        if !module.exists() {
            return Err(Diagnostic::new(
                Code::ArtifactSourceMissing,
                module.display().to_string(),
                format!("artifact `{}`: source does not exist", decl.name),
                "fix `source:` (relative paths resolve against the manifest's folder) or build the component",
            )
            .into());
        }
        let (kind, when) = (component_kind(decl.runtime), compile_when(decl, &m));
        let loaded = LoadedArtifact::load_file_with(&opts.host, &decl.name, &module, kind, when)?;
        role_fits(decl, &loaded)?;
        let at = format!("artifacts[{}].capabilities", decl.name);
        let caps = narrow(
            &narrow(&m.capabilities, decl.capabilities.as_ref(), &at)?,
            own.as_ref().and_then(|o| o.grants.as_ref()),
            &at,
        )?;
        let grants = grants_for(&m, decl, &caps, opts, session_id, (&files, &disk))?;
        artifacts.push((i, ReadyArtifact { decl: decl.clone(), own, loaded, grants }));
    }
    artifacts.sort_by_key(|(i, _)| *i);
    locked.sort_by_key(|(i, _)| *i);
    let artifacts: Vec<ReadyArtifact> = artifacts.into_iter().map(|(_, a)| a).collect();
    LoadedArtifact::warm_call_thread(artifacts.iter().map(|a| &a.grants));
    if lock.is_none() {
        write_lock(&dir, locked.into_iter().map(|(_, e)| e).collect(), &mut warnings);
    }
    let mut credentials = HashMap::new();
    for a in m.artifacts.iter().filter(|a| a.runtime == ArtifactRuntime::Driver) {
        let gateway = if a.name == m.inference.driver.artifact { m.primary_gateway() } else { a.gateway.clone() };
        let Some(g) = gateway else { continue };
        let upstream_auth = artifacts
            .iter()
            .find(|r: &&ReadyArtifact| r.decl.name == a.name)
            .and_then(|r| r.own.as_ref())
            .and_then(|o| o.manifest.upstream_auth.clone());
        let sources = Sources {
            env: &opts.env,
            config: opts.host_config.as_ref().map(|(c, p)| (c, p.clone())),
            secrets: &m.control.secrets,
        };
        let declared_auth = upstream_auth.is_some();
        let mut resolved = DriverCredential::resolve(&g, upstream_auth, &sources).map_err(|why| {
            Diagnostic::new(
                Code::ManifestGateway,
                format!("artifacts[{}].gateway.endpoint", a.name),
                why,
                "write the endpoint as https://host[:port][/path]",
            )
        })?;
        let ready = artifacts.iter().find(|r| r.decl.name == a.name);
        resolved.style = driver_kind(a, ready.and_then(|r| r.own.as_ref()));
        if resolved.style == KeyStyle::ByPath && !declared_auth && resolved.source() != CredentialSource::Keyless {
            warnings.push(Diagnostic::new(
                Code::DriverKindUnknown,
                format!("artifacts[{}]", a.name),
                format!("how driver `{}` sends its key is not declared and its kind is not known (not an Anthropic or OpenAI driver by name), so the key goes as `x-api-key` with POST …/messages and as `authorization: Bearer` with POST …/chat/completions and the like", a.name),
                "declare `upstream_auth: {header, value}` in the driver's artifact manifest",
            ));
        }
        let unresolved = if resolved.staged() { None } else { resolved.name().map(str::to_string) };
        credentials.insert(a.name.clone(), resolved);
        match unresolved {
            None => {}
            Some(var) if a.name == m.inference.driver.artifact => {
                return Err(Diagnostic::new(
                    Code::CredentialUnresolved,
                    format!("artifacts[{}].gateway.api_key", a.name),
                    format!("the primary driver's credential `${{{var}}}` resolves nowhere (not a control secret, not in the host config, not in the environment)"),
                    format!("export {var}=<key> before launching, add credentials.{var} to the host config, or mark the gateway `keyless: true`"),
                )
                .into());
            }
            Some(var) => {
                let choices: Vec<&str> = m
                    .inference
                    .alternates
                    .iter()
                    .filter(|c| c.driver.artifact() == a.name)
                    .map(|c| c.name.as_str())
                    .collect();
                warnings.push(Diagnostic::new(
                    Code::AlternateUnavailable,
                    format!("artifacts[{}].gateway.api_key", a.name),
                    format!("driver choice {} (driver `{}`) is staged unavailable: credential `{var}` resolves nowhere", choices.join(", "), a.name),
                    format!("export {var}, add credentials.{var} to the host config, or declare it under control.secrets and inject it"),
                ));
            }
        }
    }

    Ok(Prepared {
        manifest: m,
        warnings,
        artifacts,
        system,
        compaction_prompt,
        credentials,
        workdir: opts.workdir.clone(),
        files,
    })
}

pub(crate) fn grants_for(
    m: &Manifest,
    decl: &Artifact,
    caps: &Capabilities,
    opts: &LaunchOptions,
    session_id: &str,
    (files, disk): (&Path, &DiskMeter),
) -> Result<Grants, LaunchError> {
    let mut env = vec![
        ("MURMUR_CAPSULE_NAME".to_string(), m.name.clone()),
        ("MURMUR_CAPSULE_VERSION".to_string(), m.version.clone()),
        ("MURMUR_SESSION_ID".to_string(), session_id.to_string()),
    ];
    if let Some(c) = &decl.config {
        env.push(("MURMUR_ARTIFACT_CONFIG".into(), c.to_string()));
    }
    for name in &caps.env.allow {
        if manifest::is_credential_shaped(name) {
            continue;
        }
        if let Some(v) = opts.env.get(name) {
            env.push((name.clone(), v.clone()));
        }
    }
    let role = match decl.runtime {
        ArtifactRuntime::Driver => {
            let has_gateway =
                decl.gateway.is_some() || (decl.name == m.inference.driver.artifact && m.inference.endpoint.is_some());
            if has_gateway {
                env.push(("MURMUR_INFERENCE_ENDPOINT".into(), gateway_address()));
            }
            let model = if decl.name == m.inference.driver.artifact {
                m.inference.model.clone()
            } else {
                m.inference
                    .alternates
                    .iter()
                    .find(|a| a.driver.artifact() == decl.name)
                    .map(|a| a.model.clone())
                    .unwrap_or_default()
            };
            env.push(("MURMUR_INFERENCE_MODEL".into(), model));
            let full = match &decl.version {
                Some(v) => format!("{}@{v}", decl.name),
                None => decl.name.clone(),
            };
            env.push(("MURMUR_INFERENCE_DRIVER".into(), full));
            env.push(("MURMUR_INFERENCE_TRANSPORT".into(), "http".into()));
            if let Some(c) = &m.inference.driver.config {
                env.push(("MURMUR_INFERENCE_DRIVER_CONFIG".into(), c.to_string()));
            }
            ArtifactRole::Driver
        }
        ArtifactRuntime::Tool => ArtifactRole::Tool,
        ArtifactRuntime::Hook => {
            // Default-deny: the MURMUR_* set only, no folder, no network, a 30 s deadline (or
            // the capsule's own, when shorter).
            env.retain(|(k, _)| k.starts_with("MURMUR_"));
            let deadline_seconds = caps.limits.deadline_seconds.min(crate::hook::HOOK_DEADLINE_SECS);
            let limits = Limits { deadline_seconds, ..caps.limits };
            return Ok(Grants {
                role: ArtifactRole::Hook,
                env: env.into(),
                preopen: None,
                limits,
                policy: OutgoingPolicy { allow: Vec::new(), gateway: None, gate: None },
                disk: disk.clone(),
            });
        }
    };
    let preopen = match role {
        ArtifactRole::Tool => {
            let scope = Scope { workdir: files.to_path_buf(), relative: caps.filesystem.scope.clone() };
            // Resolved now to create it and refuse a planted link early; again at every call.
            scope.resolve().map_err(LaunchError::Files)?;
            Some(scope)
        }
        ArtifactRole::Driver | ArtifactRole::Hook => None,
    };
    let allow = caps.network.allow.iter().filter_map(|e| manifest::AllowRule::parse(e).ok()).collect();
    Ok(Grants {
        role,
        env: env.into(),
        preopen,
        limits: caps.limits,
        policy: OutgoingPolicy { allow, gateway: None, gate: None },
        disk: disk.clone(),
    })
}

/// The tools offered to the model: every `runtime: tool` artifact, with the description and
/// input schema from its folder manifest (`input_schema`, `input` or `parameters`), and
/// `{"type": "object"}` when it has none.
pub fn tool_specs(p: &Prepared) -> Vec<ToolSpec> {
    p.artifacts
        .iter()
        .filter(|a| a.decl.runtime == ArtifactRuntime::Tool)
        .map(|a| ToolSpec {
            name: a.decl.name.clone(),
            description: a.own.as_ref().and_then(|o| o.description.clone()),
            // A bare component says nothing of its input: the model is offered any object
            // (real providers refuse an empty schema).
            parameters: a
                .own
                .as_ref()
                .and_then(|o| o.schema.clone())
                .unwrap_or_else(|| serde_json::json!({"type": "object"})),
        })
        .collect()
}
