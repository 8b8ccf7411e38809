//! The host file (`capsule host host.yaml`): which capsules one `capsule host` process runs, and
//! where its host API listens. Plain data: parsing and checks only, no filesystem access. The
//! CLI reads the file (or lists a folder's subfolders for `capsule host <dir>`), then calls
//! [`parse`] and [`HostFile::plan`] (or [`plan_folders`]).
//!
//! ```yaml
//! capsules:
//!   - path: ./hello                 # a capsule folder, or its murmur.yaml
//!   - name: writer                  # default: the capsule folder's name
//!     path: ./agents/writer/murmur.yaml
//!     workdir: /var/lib/capsule/writer   # default: capsule-work/<name> (current directory)
//!     port: 8701                    # the door's port; default: an OS-chosen port
//! bind: 127.0.0.1                   # doors and host API (default 127.0.0.1); another
//!                                   # address needs `tls` and door tokens
//! port: 8700                        # the host API's port; default: an OS-chosen port
//! config: ./host-config.yaml        # the host config (credentials, machine spend ceiling)
//! tls: {cert: ./cert.pem, key: ./key.pem}   # TLS for the host API and every door
//! ```
//!
//! Relative paths (`path`, `workdir`, `config`, `tls`) resolve against the host file's folder. Unknown
//! keys are refused like the manifest's. Guarantees of a [`HostPlan`]: at least one capsule, every
//! name unique and URL-safe, no fixed port used twice (doors and the host API together), a
//! loopback bind address unless `tls` is set (each capsule's door must then require its token,
//! which its launch checks). Deliberately not checked here: whether the paths exist (the capsule's
//! launch refuses a missing manifest with its own code, and the host reports it per capsule).

use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use crate::diagnostics::{Code, Diagnostic, Diagnostics};

/// The host file as written.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostFile {
    /// The capsules to run, in start order.
    pub capsules: Vec<CapsuleEntry>,
    /// Address the doors and the host API listen on (loopback only).
    #[serde(default)]
    pub bind: Option<IpAddr>,
    /// The host API's port (0 or absent: OS-chosen).
    #[serde(default)]
    pub port: Option<u16>,
    /// The host config file (credentials, `spend.machine_tokens_per_day`).
    #[serde(default)]
    pub config: Option<String>,
    /// TLS for the host API and every door.
    #[serde(default)]
    pub tls: Option<TlsEntry>,
    /// Join a cluster on NATS JetStream.
    #[serde(default)]
    pub cluster: Option<ClusterEntry>,
}

/// `cluster:` as written.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClusterEntry {
    /// NATS server URLs, comma-separated (`nats://a:4222,nats://b:4222`).
    pub servers: String,
    /// This host's name in the cluster (default: the machine's name and the process id).
    #[serde(default)]
    pub name: Option<String>,
    /// Replicas of the journal stream and the lease bucket (default 3).
    #[serde(default)]
    pub replicas: Option<usize>,
    /// Seconds a lease lives without a renewal (default 3).
    #[serde(default)]
    pub lease_ttl_secs: Option<u64>,
}

/// `tls:` as written: PEM files.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TlsEntry {
    /// The certificate chain, leaf first.
    pub cert: String,
    /// The private key.
    pub key: String,
}

/// One `capsules[]` entry as written.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct CapsuleEntry {
    /// The name used by the host API (`/capsules/<name>`); default: the capsule folder's name.
    #[serde(default)]
    pub name: Option<String>,
    /// The capsule folder, or its `murmur.yaml`.
    pub path: String,
    /// The capsule's workdir; default `capsule-work/<name>`.
    #[serde(default)]
    pub workdir: Option<String>,
    /// The door's port (0 or absent: OS-chosen).
    #[serde(default)]
    pub port: Option<u16>,
}

/// What the host runs, with every path resolved and every rule checked.
#[derive(Debug, Clone, PartialEq)]
pub struct HostPlan {
    /// The capsules, in start order.
    pub capsules: Vec<PlannedCapsule>,
    /// The bind address of the doors and the host API.
    pub bind: IpAddr,
    /// The host API's port (0: OS-chosen).
    pub port: u16,
    /// The host config file, when the host file names one.
    pub config: Option<PathBuf>,
    /// TLS certificate and key files, resolved.
    pub tls: Option<(PathBuf, PathBuf)>,
    /// The cluster to join, when any.
    pub cluster: Option<ClusterEntry>,
}

/// One capsule of a [`HostPlan`].
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedCapsule {
    /// Unique, URL-safe name.
    pub name: String,
    /// The capsule folder or its `murmur.yaml`.
    pub manifest: PathBuf,
    /// The workdir.
    pub workdir: PathBuf,
    /// The door's port (0: OS-chosen).
    pub port: u16,
}

/// The workdir a capsule gets when its entry names none.
pub fn default_workdir(name: &str) -> PathBuf {
    PathBuf::from("capsule-work").join(name)
}

/// Whether `name` can name a capsule in the host API: 1..100 of `A-Z a-z 0-9 . _ -`, not
/// starting with `.`.
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 100
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
}

/// Parse a host file. `origin` names the file in diagnostics.
pub fn parse(text: &str, origin: &str) -> Result<HostFile, Diagnostics> {
    let value: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| {
        Diagnostic::new(
            Code::ManifestSyntax,
            origin,
            format!("the host file is not valid YAML: {e}"),
            "fix the YAML syntax at the position shown",
        )
    })?;
    if !value.is_object() {
        return Err(Diagnostic::new(
            Code::ManifestShape,
            origin,
            "the host file must be a mapping with a `capsules:` list",
            "start the file with `capsules:` (see docs/host.md)",
        )
        .into());
    }
    serde_path_to_error::deserialize::<_, HostFile>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let at = if path == "." { origin.to_string() } else { format!("{origin}: {path}") };
        let d = if inner.starts_with("unknown field ") {
            Diagnostic::new(Code::ManifestUnknownKey, at, inner, "use only `capsules` (name, path, workdir, port), `bind`, `port`, `config` and `tls` (cert, key); unknown keys are never ignored")
        } else {
            Diagnostic::new(Code::ManifestShape, at, inner, "give the key the type docs/host.md names")
        };
        Diagnostics::from(d)
    })
}

/// The folder name a capsule path stands for: the folder itself, or the folder of a
/// `murmur.yaml`. `None` when the path has no usable last component (`.`, `..`, `/`).
fn folder_name(path: &str) -> Option<String> {
    let p = Path::new(path);
    let folder = if p.extension().is_some_and(|e| e == "yaml" || e == "yml") { p.parent()? } else { p };
    let name = folder.file_name()?.to_str()?;
    Some(name.to_string())
}

fn resolve(base: &Path, p: &str) -> PathBuf {
    let p = Path::new(p);
    if p.is_absolute() { p.to_path_buf() } else { base.join(p) }
}

impl HostFile {
    /// Resolve paths against `base` (the host file's folder) and check every rule; every
    /// problem is reported, not only the first.
    pub fn plan(&self, base: &Path, origin: &str) -> Result<HostPlan, Diagnostics> {
        let mut found = Vec::new();
        let bind = self.bind.unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
        if !bind.is_loopback() && self.tls.is_none() {
            found.push(Diagnostic::new(
                Code::ManifestInvalid,
                format!("{origin}: bind"),
                format!("`{bind}` is not a loopback address, and the host API and doors serve beyond loopback only over TLS"),
                "remove `bind` (or use 127.0.0.1 / ::1), or add `tls: {cert: …, key: …}` and `network.authentication: bearer` in each capsule",
            ));
        }
        if self.capsules.is_empty() {
            found.push(Diagnostic::new(
                Code::ManifestInvalid,
                format!("{origin}: capsules"),
                "the host runs no capsule",
                "list at least one capsule: `capsules: [{path: ./my-capsule}]`",
            ));
        }
        let mut capsules = Vec::new();
        for (i, c) in self.capsules.iter().enumerate() {
            let at = format!("{origin}: capsules[{i}]");
            if c.path.trim().is_empty() {
                found.push(Diagnostic::new(
                    Code::ManifestInvalid,
                    format!("{at}.path"),
                    "the path is empty",
                    "point `path` at a capsule folder or its murmur.yaml",
                ));
                continue;
            }
            let Some(name) = c.name.clone().or_else(|| folder_name(&c.path)) else {
                found.push(Diagnostic::new(
                    Code::ManifestInvalid,
                    format!("{at}.name"),
                    format!("`{}` has no folder name to name the capsule by", c.path),
                    "give the entry a `name`",
                ));
                continue;
            };
            let workdir = c.workdir.as_deref().map(|w| resolve(base, w)).unwrap_or_else(|| default_workdir(&name));
            capsules.push(PlannedCapsule {
                name,
                manifest: resolve(base, &c.path),
                workdir,
                port: c.port.unwrap_or(0),
            });
        }
        let port = self.port.unwrap_or(0);
        found.extend(check(&capsules, port, origin));
        if found.iter().any(|d| d.severity() == crate::Severity::Error) {
            return Err(Diagnostics(found));
        }
        let tls = self.tls.as_ref().map(|t| (resolve(base, &t.cert), resolve(base, &t.key)));
        Ok(HostPlan {
            capsules,
            bind,
            port,
            config: self.config.as_deref().map(|c| resolve(base, c)),
            tls,
            cluster: self.cluster.clone(),
        })
    }
}

/// The plan for `capsule host <dir>`: one capsule per subfolder holding a `murmur.yaml`
/// (`folders` are those subfolders' names, as the caller listed them), named by its folder,
/// started in name order, each with the default workdir and an OS-chosen port.
pub fn plan_folders(dir: &Path, folders: &[String]) -> Result<HostPlan, Diagnostics> {
    let origin = dir.display().to_string();
    if folders.is_empty() {
        return Err(Diagnostic::new(
            Code::ManifestMissing,
            &origin,
            "no subfolder holds a murmur.yaml",
            "pass a folder of capsule folders, or a host.yaml (see docs/host.md); for one capsule use `capsule run`",
        )
        .into());
    }
    let mut names = folders.to_vec();
    names.sort();
    let capsules: Vec<PlannedCapsule> = names
        .iter()
        .map(|n| PlannedCapsule { name: n.clone(), manifest: dir.join(n), workdir: default_workdir(n), port: 0 })
        .collect();
    let found = check(&capsules, 0, &origin);
    if !found.is_empty() {
        return Err(Diagnostics(found));
    }
    Ok(HostPlan { capsules, bind: IpAddr::V4(Ipv4Addr::LOCALHOST), port: 0, config: None, tls: None, cluster: None })
}

/// Names valid and unique; fixed ports unique across the doors and the host API.
fn check(capsules: &[PlannedCapsule], api_port: u16, origin: &str) -> Vec<Diagnostic> {
    let mut found = Vec::new();
    let mut names: HashMap<&str, usize> = HashMap::new();
    let mut ports: HashMap<u16, String> = HashMap::new();
    if api_port != 0 {
        ports.insert(api_port, "the host API (`port`)".into());
    }
    for (i, c) in capsules.iter().enumerate() {
        let at = format!("{origin}: capsules[{i}]");
        if !valid_name(&c.name) {
            found.push(Diagnostic::new(
                Code::ManifestInvalid,
                format!("{at}.name"),
                format!(
                    "`{}` must be 1..100 characters of A-Z, a-z, 0-9, `.`, `_` and `-`, not starting with `.`",
                    c.name
                ),
                "give the capsule a `name` such as `my-agent`",
            ));
        }
        if let Some(first) = names.insert(&c.name, i) {
            found.push(Diagnostic::new(
                Code::ManifestInvalid,
                format!("{at}.name"),
                format!("the name `{}` is already used by capsules[{first}]", c.name),
                "give each capsule a unique `name`",
            ));
        }
        if c.port != 0
            && let Some(other) = ports.insert(c.port, format!("capsules[{i}]"))
        {
            found.push(Diagnostic::new(
                Code::ManifestInvalid,
                format!("{at}.port"),
                format!("port {} is also used by {other}", c.port),
                "give each door its own port, or leave `port` out for an OS-chosen one",
            ));
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plan(text: &str) -> Result<HostPlan, Diagnostics> {
        parse(text, "host.yaml")?.plan(Path::new("/srv/hosts"), "host.yaml")
    }

    #[test]
    fn a_minimal_host_file_names_capsules_by_folder_and_resolves_paths_against_its_folder() {
        let p = plan("capsules:\n  - path: ./hello\n  - {path: agents/writer/murmur.yaml, port: 8701, workdir: w}\n")
            .expect("valid");
        assert_eq!(p.bind, IpAddr::V4(Ipv4Addr::LOCALHOST));
        assert_eq!(p.port, 0);
        assert_eq!(p.capsules[0].name, "hello");
        assert_eq!(p.capsules[0].manifest, PathBuf::from("/srv/hosts/./hello"));
        assert_eq!(p.capsules[0].workdir, PathBuf::from("capsule-work/hello"));
        assert_eq!(p.capsules[1].name, "writer");
        assert_eq!(p.capsules[1].port, 8701);
        assert_eq!(p.capsules[1].workdir, PathBuf::from("/srv/hosts/w"));
    }

    #[test]
    fn an_unknown_key_is_refused_with_its_path() {
        let err = parse("capsules:\n  - {path: a, prot: 1}\n", "host.yaml").expect_err("refused");
        assert_eq!(err.0[0].code, Code::ManifestUnknownKey);
        assert!(err.0[0].at.contains("capsules[0]"), "{}", err.0[0]);
        let err = parse("capsules: []\nworkers: 3\n", "host.yaml").expect_err("refused");
        assert_eq!(err.0[0].code, Code::ManifestUnknownKey);
    }

    #[test]
    fn duplicate_names_and_ports_and_a_public_bind_are_each_reported() {
        let err = plan("bind: 0.0.0.0\nport: 9000\ncapsules:\n  - {path: a, port: 9000}\n  - {path: x/a}\n  - {path: ., port: 1}\n").expect_err("refused");
        let rules: Vec<String> = err.0.iter().map(|d| d.to_string()).collect();
        assert!(rules.iter().any(|r| r.contains("bind") && r.contains("loopback")), "{rules:?}");
        assert!(rules.iter().any(|r| r.contains("capsules[0].port") && r.contains("host API")), "{rules:?}");
        assert!(rules.iter().any(|r| r.contains("capsules[1].name") && r.contains("already used")), "{rules:?}");
        assert!(rules.iter().any(|r| r.contains("capsules[2].name") && r.contains("no folder name")), "{rules:?}");
        assert!(err.0.iter().all(|d| d.code == Code::ManifestInvalid));
    }

    #[test]
    fn an_empty_host_and_bad_yaml_are_refused_with_codes() {
        assert_eq!(plan("capsules: []\n").expect_err("empty").0[0].code, Code::ManifestInvalid);
        assert_eq!(parse("capsules: [\n", "host.yaml").expect_err("syntax").0[0].code, Code::ManifestSyntax);
        assert_eq!(parse("- a\n", "host.yaml").expect_err("shape").0[0].code, Code::ManifestShape);
        assert_eq!(parse("bind: nowhere\ncapsules: []\n", "host.yaml").expect_err("ip").0[0].code, Code::ManifestShape);
    }

    #[test]
    fn folder_mode_runs_each_capsule_folder_in_name_order() {
        let p = plan_folders(Path::new("/srv/caps"), &["b".into(), "a".into()]).expect("valid");
        let names: Vec<&str> = p.capsules.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(p.capsules[0].manifest, PathBuf::from("/srv/caps/a"));
        assert_eq!(plan_folders(Path::new("/srv/caps"), &[]).expect_err("none").0[0].code, Code::ManifestMissing);
        assert!(plan_folders(Path::new("/srv/caps"), &["has space".into()]).is_err());
    }

    #[test]
    fn a_public_bind_is_planned_only_with_tls_and_its_files_resolve_against_the_host_file() {
        let p = plan("bind: 0.0.0.0\ntls: {cert: certs/c.pem, key: /abs/k.pem}\ncapsules:\n  - {path: a}\n")
            .expect("planned");
        assert_eq!(p.bind, IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(p.tls, Some((PathBuf::from("/srv/hosts/certs/c.pem"), PathBuf::from("/abs/k.pem"))));
        let err = parse("tls: {cert: c.pem}\ncapsules: []\n", "host.yaml").expect_err("key missing");
        assert_eq!(err.0[0].code, Code::ManifestShape, "{err:?}");
    }
}
