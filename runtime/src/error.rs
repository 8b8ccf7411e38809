//! Errors of the sandbox host. Load errors refuse an artifact before anything runs; call errors
//! are values a call returns, each with its own code, never a host crash.

use capsule_protocol::Code;
use std::path::PathBuf;

/// A boxed cause from wasmtime or the OS, kept whole.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why an artifact could not be loaded.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file does not exist or cannot be read.
    #[error(
        "{code}: artifact `{artifact}`: cannot read {path}; check `source:` (relative paths resolve against the manifest's folder)", code = Code::ArtifactSourceMissing
    )]
    Read {
        /// Artifact name.
        artifact: String,
        /// Path tried.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The bytes are not a WebAssembly component.
    #[error(
        "{code}: artifact `{artifact}`: {path} is not a WebAssembly component ({what}); build it for wasm32-wasip2 as a component", code = Code::ArtifactNotComponent
    )]
    NotComponent {
        /// Artifact name.
        artifact: String,
        /// Path.
        path: PathBuf,
        /// What it looks like instead.
        what: &'static str,
    },
    /// The component lacks the export its kind needs (`murmur:tool/run@0.1.0` for drivers and
    /// tools, `murmur:hook/lifecycle@0.5.0` for hooks).
    #[error(
        "{code}: artifact `{artifact}` does not export `{export}` (it exports: {exports}); every {kind} must export it", code = Code::ArtifactMissingExport
    )]
    MissingExport {
        /// Artifact name.
        artifact: String,
        /// The export it needs.
        export: &'static str,
        /// `driver and tool`, or `hook`.
        kind: &'static str,
        /// What it exports.
        exports: String,
    },
    /// The component imports an interface the host does not provide.
    #[error(
        "{code}: artifact `{artifact}` imports `{interface}`, which this host does not provide; drivers and tools may import only murmur:stream/events, murmur:text/chunks, murmur:task/task and WASI 0.2 (cli, clocks, random, io, filesystem, http), hooks only murmur:runtime/inference and WASI 0.2", code = Code::ArtifactUnknownImport
    )]
    UnknownImport {
        /// Artifact name.
        artifact: String,
        /// The interface.
        interface: String,
    },
    /// Compilation or linking failed.
    #[error("{code}: artifact `{artifact}` failed to compile or link; rebuild it for wasm32-wasip2", code = Code::ArtifactCompile)]
    Compile {
        /// Artifact name.
        artifact: String,
        /// The wasmtime error.
        #[source]
        source: Cause,
    },
}

impl LoadError {
    /// The diagnostic code.
    pub fn code(&self) -> Code {
        match self {
            LoadError::Read { .. } => Code::ArtifactSourceMissing,
            LoadError::NotComponent { .. } => Code::ArtifactNotComponent,
            LoadError::MissingExport { .. } => Code::ArtifactMissingExport,
            LoadError::UnknownImport { .. } => Code::ArtifactUnknownImport,
            LoadError::Compile { .. } => Code::ArtifactCompile,
        }
    }
}

/// Why a call did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum CallError {
    /// The call ran past its deadline and was interrupted.
    #[error(
        "{code}: `{artifact}` ran past its deadline of {seconds} s and was stopped; raise capabilities.limits.deadline_seconds if the work is legitimately long", code = Code::DeadlineExceeded
    )]
    Deadline {
        /// Artifact name.
        artifact: String,
        /// The deadline.
        seconds: f64,
    },
    /// The guest tried to grow memory (or a table) past its limit.
    #[error(
        "{code}: `{artifact}` tried to grow {what} past its limit of {limit}; raise capabilities.limits.{key} if it legitimately needs more", code = Code::MemoryLimit
    )]
    MemoryLimit {
        /// Artifact name.
        artifact: String,
        /// `memory` or `a table`.
        what: &'static str,
        /// The limit.
        limit: u64,
        /// The manifest key.
        key: &'static str,
    },
    /// The guest trapped (a panic, `unreachable`, an out-of-bounds access...).
    #[error("{code}: `{artifact}` crashed (trap: {trap}){stderr_note}; this is a bug in the artifact", code = Code::GuestTrap)]
    Trap {
        /// Artifact name.
        artifact: String,
        /// The trap's short description.
        trap: String,
        /// `; guest said: …` when the guest wrote to stderr before trapping.
        stderr_note: String,
        /// The wasmtime error with its backtrace.
        #[source]
        source: Cause,
    },
    /// The call reached a host-side budget (WASI resources, bytes written, result size).
    #[error(
        "{code}: `{artifact}` reached the host's limit on {what} ({limit}); raise capabilities.limits.{key} if it legitimately needs more", code = Code::HostLimit
    )]
    HostLimit {
        /// Artifact name.
        artifact: String,
        /// What was limited, in words.
        what: &'static str,
        /// The limit.
        limit: u64,
        /// The manifest key.
        key: &'static str,
    },
    /// The tool's scope is not a plain folder inside the workdir right now.
    #[error(
        "{code}: `{artifact}` was not run: its scope {source}; something replaced the folder, remove the link or point filesystem.scope elsewhere", code = Code::ScopeRefused
    )]
    Scope {
        /// Artifact name.
        artifact: String,
        /// What was wrong.
        #[source]
        source: crate::beneath::BeneathError,
    },
    /// The component's compile in the background ([`crate::later`]) failed: every call of it
    /// is refused with that compile's error.
    #[error("{code}: `{artifact}` was not run: its compile failed; rebuild it for wasm32-wasip2", code = Code::ArtifactCompile)]
    Compile {
        /// Artifact name.
        artifact: String,
        /// The compile's error.
        #[source]
        source: std::sync::Arc<LoadError>,
    },
    /// The instance could not be created (pool exhausted, start function failed...).
    #[error("{code}: `{artifact}` could not be instantiated", code = Code::ArtifactCompile)]
    Instantiate {
        /// Artifact name.
        artifact: String,
        /// The wasmtime error.
        #[source]
        source: Cause,
    },
}

impl CallError {
    /// The diagnostic code.
    pub fn code(&self) -> Code {
        match self {
            CallError::Deadline { .. } => Code::DeadlineExceeded,
            CallError::MemoryLimit { .. } => Code::MemoryLimit,
            CallError::Trap { .. } => Code::GuestTrap,
            CallError::HostLimit { .. } => Code::HostLimit,
            CallError::Scope { .. } => Code::ScopeRefused,
            CallError::Instantiate { .. } | CallError::Compile { .. } => Code::ArtifactCompile,
        }
    }
}
