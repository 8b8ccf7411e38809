//! Diagnostics: every error or warning a user can see carries a stable code (`E-…`/`W-…`),
//! the field or thing it is about, the rule that was broken and what to do about it.
//!
//! Codes are grouped by where they arise: `E-MAN` the manifest, `E-CAP` an artifact or its
//! capabilities, `E-RUN` running a session, `W-…` warnings that do not stop anything.

use std::fmt;

/// A stable diagnostic code. The string form is what users search for, so it never changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Code {
    /// No manifest at the given path.
    ManifestMissing,
    /// The manifest is not valid YAML.
    ManifestSyntax,
    /// The manifest has a key this runtime does not know.
    ManifestUnknownKey,
    /// A key has the wrong type, or a required key is absent.
    ManifestShape,
    /// A value breaks a rule of CONTRACT §1 (name charset, ranges, exclusivity...).
    ManifestInvalid,
    /// An artifact is referenced but not declared, or declared twice.
    ManifestArtifactRef,
    /// A gateway, endpoint or credential reference is malformed.
    ManifestGateway,
    /// A capability grant is malformed (`network.allow`, `filesystem.scope`, `env.allow`, limits).
    ManifestCapability,
    /// An artifact's `source` does not exist.
    ArtifactSourceMissing,
    /// An artifact file is not a WebAssembly component.
    ArtifactNotComponent,
    /// A component does not export `murmur:tool/run@0.1.0`.
    ArtifactMissingExport,
    /// A component imports an interface the host does not provide.
    ArtifactUnknownImport,
    /// A component failed to compile or instantiate.
    ArtifactCompile,
    /// An artifact folder's own `murmur.yaml` is invalid.
    ArtifactManifest,
    /// A component is declared with a role its imports rule out: a driver that imports the
    /// tool-only `murmur:task/task`, or a tool that imports the driver-only
    /// `murmur:text/chunks`.
    ArtifactWrongRole,
    /// The primary driver's credential resolves nowhere (CONTRACT §5).
    CredentialUnresolved,
    /// A guest call ran past `capabilities.limits.deadline_seconds`.
    DeadlineExceeded,
    /// A guest tried to grow memory past `capabilities.limits.memory_bytes` (or tables past theirs).
    MemoryLimit,
    /// A guest trapped (panic, unreachable, out of bounds...).
    GuestTrap,
    /// A call reached a host-side budget: WASI resources, bytes written to files, or the size
    /// of its result (`capabilities.limits.resources|disk_bytes|output_bytes`).
    HostLimit,
    /// A tool's scope is a symlink or not a folder at call time; the call is refused.
    ScopeRefused,
    /// A driver reported a failed inference (provider error, malformed stream...).
    InferenceFailed,
    /// A driver answered with data that is not the neutral response format.
    DriverProtocol,
    /// An actor of the session crashed while serving a request; it was restarted.
    ActorCrashed,
    /// The session's files could not be written.
    SessionIo,
    /// A journal file has a damaged line before its end; `--resume --repair` keeps the prefix.
    JournalDamaged,
    /// A step could not be journaled (the journal actor is unreachable, or a write failed);
    /// the step was not taken and the task ended.
    JournalUnavailable,
    /// `--resume` was given a folder that is not a session, or a session with nothing to resume.
    NotASession,
    /// An artifact's own manifest asks for what this runtime cannot run (a native build, a
    /// hook or skill).
    ArtifactUnsupported,
    /// An artifact named by name and version is not installed (and there is no registry).
    ArtifactNotInstalled,
    /// An installed package does not match its checksum or `murmur.lock`.
    ArtifactIntegrity,
    /// A package is not a readable zip, or has an entry that would escape or is too large.
    ArtifactPackageUnsafe,
    /// `murmur.lock` could not be written (warning).
    LockNotWritten,
    /// A capsule-manifest key Murmur accepts but this runtime does not honour (warning).
    ManifestKeyNotHonoured,
    /// An artifact manifest key this runtime does not know or cannot honour (warning).
    ArtifactKeyIgnored,
    /// The TLS certificate or key of a door or the host API cannot be used.
    TlsRefused,
    /// The door cannot listen on its address (port taken, address not local, not allowed).
    DoorBind,
    /// A session file or folder is not one the host made: a symlink, a hard link, another
    /// user's file, or not a regular file.
    SessionFileRefused,
    /// The task ran out of turns.
    MaxTurns,
    /// A tool call was running when the process stopped; on resume the model is told it may
    /// or may not have taken effect, and it is not run again.
    ToolInterrupted,
    /// A task waited for a person longer than `lifecycle.input_timeout_secs`.
    InputTimeout,
    /// A hook's `binding`, `execution_mode` and `commit_policy` do not fit together.
    HookContract,
    /// A hook call failed (trap, deadline, limit, or an error it returned); the session goes on.
    HookFailed,
    /// A hook returned an output its event does not honour; the output was discarded.
    HookArmRefused,
    /// No NATS server of the cluster answered at start.
    ClusterUnreachable,
    /// JetStream refused or did not answer (no quorum, a stream or bucket that cannot be made).
    ClusterUnavailable,
    /// An append was refused because another host appended since: this host lost the session.
    ClusterFenced,
    /// A journal entry or lease in the cluster is not in this runtime's format.
    ClusterBadEntry,
    /// Another host holds the session's lease.
    LeaseHeld,
    /// A host could not renew its lease: it expired or another host took it.
    LeaseLost,
    /// A capsule folder cannot be kept in the cluster's object store, or a stored capsule does
    /// not check out (a hash or path that does not hold, too large).
    ClusterBadCapsule,
    /// The compaction hook failed, so the over-full context could not be compacted; the task
    /// failed.
    CompactionFailed,
    /// An alternate driver choice is staged unavailable: its credential resolves nowhere.
    AlternateUnavailable,
    /// The model is not in the built-in table; defaults are used.
    UnknownModel,
    /// An `env.allow` entry is credential-shaped and will never be passed.
    CredentialEnvDropped,
    /// A keyed driver whose artifact declares no `upstream_auth` and whose kind is unknown:
    /// its key goes by the request's path.
    DriverKindUnknown,
    /// The session's spend ceiling (`inference.max_session_tokens`) refused a call.
    SessionCeiling,
    /// The host's daily spend ceiling (`spend.machine_tokens_per_day`) refused a call.
    MachineCeiling,
}

impl Code {
    /// The stable string form, e.g. `E-MAN-003`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Code::ManifestMissing => "E-MAN-001",
            Code::ManifestSyntax => "E-MAN-002",
            Code::ManifestUnknownKey => "E-MAN-003",
            Code::ManifestShape => "E-MAN-004",
            Code::ManifestInvalid => "E-MAN-005",
            Code::ManifestArtifactRef => "E-MAN-006",
            Code::ManifestGateway => "E-MAN-007",
            Code::ManifestCapability => "E-MAN-008",
            Code::ArtifactSourceMissing => "E-CAP-001",
            Code::ArtifactNotComponent => "E-CAP-002",
            Code::ArtifactMissingExport => "E-CAP-003",
            Code::ArtifactUnknownImport => "E-CAP-004",
            Code::ArtifactCompile => "E-CAP-005",
            Code::ArtifactManifest => "E-CAP-006",
            Code::ArtifactWrongRole => "E-CAP-007",
            Code::ArtifactUnsupported => "E-CAP-008",
            Code::ArtifactNotInstalled => "E-CAP-009",
            Code::ArtifactIntegrity => "E-CAP-010",
            Code::ArtifactPackageUnsafe => "E-CAP-011",
            Code::CredentialUnresolved => "E-RUN-025",
            Code::DeadlineExceeded => "E-RUN-030",
            Code::MemoryLimit => "E-RUN-031",
            Code::GuestTrap => "E-RUN-032",
            Code::HostLimit => "E-RUN-033",
            Code::ScopeRefused => "E-RUN-034",
            Code::InferenceFailed => "E-RUN-040",
            Code::DriverProtocol => "E-RUN-041",
            Code::ActorCrashed => "E-RUN-050",
            Code::SessionIo => "E-RUN-060",
            Code::DoorBind => "E-RUN-061",
            Code::SessionFileRefused => "E-RUN-062",
            Code::JournalDamaged => "E-RUN-063",
            Code::JournalUnavailable => "E-RUN-064",
            Code::NotASession => "E-RUN-065",
            Code::TlsRefused => "E-RUN-066",
            Code::MaxTurns => "E-RUN-070",
            Code::ToolInterrupted => "E-RUN-090",
            Code::InputTimeout => "E-RUN-091",
            Code::HookContract => "E-CAP-012",
            Code::HookFailed => "E-RUN-092",
            Code::HookArmRefused => "E-RUN-093",
            Code::CompactionFailed => "E-RUN-094",
            Code::ClusterUnreachable => "E-CLU-001",
            Code::ClusterUnavailable => "E-CLU-002",
            Code::ClusterFenced => "E-CLU-003",
            Code::ClusterBadEntry => "E-CLU-004",
            Code::LeaseHeld => "E-CLU-005",
            Code::LeaseLost => "E-CLU-006",
            Code::ClusterBadCapsule => "E-CLU-007",
            Code::AlternateUnavailable => "W-RUN-003",
            Code::UnknownModel => "W-RUN-009",
            Code::CredentialEnvDropped => "W-CAP-001",
            Code::DriverKindUnknown => "W-CAP-002",
            Code::ArtifactKeyIgnored => "W-CAP-003",
            Code::ManifestKeyNotHonoured => "W-MAN-001",
            Code::LockNotWritten => "W-CAP-004",
            Code::SessionCeiling => "E-RUN-080",
            Code::MachineCeiling => "E-RUN-081",
        }
    }

    /// Whether this code is a warning (`W-…`) rather than an error.
    pub fn is_warning(self) -> bool {
        self.as_str().starts_with('W')
    }
}

impl fmt::Display for Code {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Whether a diagnostic stops the load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    /// Stops the load or the call.
    Error,
    /// Reported, nothing stops.
    Warning,
}

/// One finding: code, where, what rule, what to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Stable code.
    pub code: Code,
    /// The field path (`inference.driver.artifact`) or thing (a file path) it is about.
    pub at: String,
    /// The rule that was broken, as one sentence.
    pub rule: String,
    /// What the user should do.
    pub fix: String,
}

impl Diagnostic {
    /// Build a diagnostic.
    pub fn new(code: Code, at: impl Into<String>, rule: impl Into<String>, fix: impl Into<String>) -> Self {
        Diagnostic { code, at: at.into(), rule: rule.into(), fix: fix.into() }
    }

    /// Error or warning, from the code.
    pub fn severity(&self) -> Severity {
        if self.code.is_warning() { Severity::Warning } else { Severity::Error }
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} at {}: {} (fix: {})", self.code, self.at, self.rule, self.fix)
    }
}

impl std::error::Error for Diagnostic {}

/// A list of diagnostics that together refuse a load.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl Diagnostics {
    /// Whether any entry is an error.
    pub fn has_errors(&self) -> bool {
        self.0.iter().any(|d| d.severity() == Severity::Error)
    }
}

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

impl std::error::Error for Diagnostics {}

impl From<Diagnostic> for Diagnostics {
    fn from(d: Diagnostic) -> Self {
        Diagnostics(vec![d])
    }
}

#[cfg(test)]
mod tests {
    use super::Code;
    use std::path::{Path, PathBuf};

    /// Every code of the enum, read from its own `as_str` table.
    fn table() -> Vec<String> {
        let me = include_str!("diagnostics.rs");
        me.lines()
            .filter_map(|l| l.trim().strip_prefix("Code::"))
            .filter_map(|l| l.split('"').nth(1))
            .map(str::to_string)
            .collect()
    }

    #[test]
    fn every_code_is_unique_and_shaped_like_a_code() {
        let codes = table();
        assert!(codes.len() > 30, "the table was read: {codes:?}");
        let mut seen = std::collections::HashSet::new();
        for c in &codes {
            assert!(seen.insert(c.clone()), "{c} is used by two variants");
            let parts: Vec<&str> = c.split('-').collect();
            assert!(
                parts.len() == 3
                    && matches!(parts[0], "E" | "W")
                    && parts[1].len() == 3
                    && parts[2].len() == 3
                    && parts[2].bytes().all(|b| b.is_ascii_digit()),
                "{c}"
            );
        }
        assert_eq!(Code::MaxTurns.as_str(), "E-RUN-070");
    }

    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).expect("source folder").flatten() {
            let p = entry.path();
            if p.is_dir() {
                rust_files(&p, out);
            } else if p.extension().is_some_and(|e| e == "rs") {
                out.push(p);
            }
        }
    }

    /// A code written as a literal in a message can drift from `Code` (the number changes in
    /// one place, not the other); every message takes its code from `Code`. Tests may spell
    /// codes out: they assert what users see.
    #[test]
    fn no_message_outside_this_table_spells_a_code_out() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut files = Vec::new();
        for crate_src in ["actors/src", "runtime/src", "protocol/src", "src", "stub/src"] {
            rust_files(&root.join(crate_src), &mut files);
        }
        assert!(files.len() > 50, "the sources were found");
        let mut found = Vec::new();
        for f in files {
            let name = f.file_name().and_then(|n| n.to_str()).unwrap_or("");
            if name == "diagnostics.rs" || name.ends_with("tests.rs") {
                continue;
            }
            let text = std::fs::read_to_string(&f).expect("read");
            let code = text.split("#[cfg(test)]").next().unwrap_or("");
            for (i, line) in code.lines().enumerate() {
                let t = line.trim_start();
                if t.starts_with("//") {
                    continue;
                }
                let spelled = line.match_indices("E-").chain(line.match_indices("W-")).any(|(at, _)| {
                    let rest = &line.as_bytes()[at + 2..];
                    rest.len() >= 7
                        && rest[..3].iter().all(u8::is_ascii_uppercase)
                        && rest[3] == b'-'
                        && rest[4..7].iter().all(u8::is_ascii_digit)
                });
                if spelled {
                    found.push(format!("{}:{}: {}", f.display(), i + 1, t));
                }
            }
        }
        assert!(found.is_empty(), "codes spelled out instead of taken from `Code`:\n{}", found.join("\n"));
    }
}
