//! Errors of the actor layer. Launch errors refuse a session before it starts; the rest are
//! values that end a task with a coded message.

use capsule_protocol::{Code, Diagnostic, Diagnostics};
use capsule_runtime::{CallError, LoadError};

/// Why a session could not start.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// The manifest was refused.
    #[error("{0}")]
    Manifest(#[from] Diagnostics),
    /// An artifact was refused.
    #[error("{0}")]
    Load(#[from] LoadError),
    /// An installed artifact package was missing or refused.
    #[error("{0}")]
    Package(#[from] crate::package::PackageError),
    /// The cluster refused the session (its lease is held elsewhere, or JetStream failed).
    #[error("{0}")]
    Cluster(#[from] crate::cluster::ClusterError),
    /// The engine could not start.
    #[error("the sandbox host could not start")]
    Host(#[source] LoadError),
    /// A session file could not be written.
    #[error("{code}: cannot write session files under {path}; check the workdir is writable", code = Code::SessionIo)]
    Io {
        /// The path.
        path: std::path::PathBuf,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// A session file or folder is not one the host made (a symlink, a hard link, another
    /// user's, not a regular file), or a tool's scope is a link.
    #[error(
        "{code}: {0}; the host never follows links in a session folder or the workdir: remove what was planted, or start a new session", code = Code::SessionFileRefused
    )]
    Files(#[source] capsule_runtime::BeneathError),
    /// A journal file has a damaged line in the middle; `--repair` keeps the valid prefix.
    #[error(
        "{code}: {file} is damaged at line {line} ({good} good lines before it, {lines} from there on); nothing was resumed. Pass --repair to keep the first {good} lines and drop the rest, or keep the folder for inspection", code = Code::JournalDamaged
    )]
    JournalDamaged {
        /// The file.
        file: std::path::PathBuf,
        /// The first damaged line (1-based).
        line: usize,
        /// Lines from the damaged one to the end.
        lines: usize,
        /// Good lines before it.
        good: usize,
    },
    /// `--resume` was given a folder that is not a session folder.
    #[error(
        "{code}: {} is not a session folder (a `ses_…` folder holding trace.jsonl); pass the folder `capsule run` printed, or find it with `capsule ps <workdir>`",
        path.display(),
        code = Code::NotASession
    )]
    NotASession {
        /// The folder.
        path: std::path::PathBuf,
    },
    /// `--resume` of a session that ended (its last record is `session_end`) with nothing left
    /// to run: nothing is started and nothing is written.
    #[error(
        "session {session} ended and has nothing to resume (no task was running or queued); start a new session with `capsule run <capsule>`"
    )]
    AlreadyEnded {
        /// The session id.
        session: String,
    },
    /// An actor could not be spawned.
    #[error("{code}: the {role} actor could not start", code = Code::ActorCrashed)]
    Spawn {
        /// Which.
        role: String,
        /// Why.
        #[source]
        source: ractor::SpawnErr,
    },
}

impl LaunchError {
    /// Whether the launch was refused for what it was given (manifest, artifact, credential,
    /// planted files, a damaged journal): the same launch would be refused again.
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            LaunchError::Manifest(_)
                | LaunchError::Load(_)
                | LaunchError::Package(_)
                | LaunchError::Files(_)
                | LaunchError::JournalDamaged { .. }
        )
    }

    /// The leading diagnostic code.
    pub fn code(&self) -> Code {
        match self {
            LaunchError::Manifest(d) => d.0.first().map(|d| d.code).unwrap_or(Code::ManifestInvalid),
            LaunchError::Load(e) | LaunchError::Host(e) => e.code(),
            LaunchError::Io { .. } => Code::SessionIo,
            LaunchError::Package(e) => e.code(),
            LaunchError::Files(_) => Code::SessionFileRefused,
            LaunchError::JournalDamaged { .. } => Code::JournalDamaged,
            LaunchError::NotASession { .. } | LaunchError::AlreadyEnded { .. } => Code::NotASession,
            LaunchError::Spawn { .. } => Code::ActorCrashed,
            LaunchError::Cluster(e) => e.code(),
        }
    }
}

impl From<Diagnostic> for LaunchError {
    fn from(d: Diagnostic) -> Self {
        LaunchError::Manifest(d.into())
    }
}

/// Why an inference call produced no usable response.
#[derive(Debug, thiserror::Error)]
pub enum InferenceError {
    /// The driver component failed (trap, deadline, memory limit).
    #[error(transparent)]
    Guest(#[from] CallError),
    /// The driver reported a failed call (provider error, malformed stream...).
    #[error("{code}: inference failed: {message}", code = Code::InferenceFailed)]
    Driver {
        /// The driver's message (status and body of a provider error, the stream problem...).
        message: String,
    },
    /// The provider could not be reached at all (refused, no such host, TLS, timeout).
    #[error(
        "{code}: cannot reach the provider at {endpoint}: {why}; check the endpoint (the manifest's gateway or --endpoint), that the provider is running, and that this machine can reach it",
        code = Code::InferenceFailed
    )]
    Unreachable {
        /// The endpoint the driver was sending to.
        endpoint: String,
        /// What went wrong, in words.
        why: String,
    },
    /// The driver answered something that is not the neutral response.
    #[error("{code}: driver `{artifact}` answered data that is not a neutral response; the driver is broken", code = Code::DriverProtocol)]
    Protocol {
        /// Which driver.
        artifact: String,
        /// The parse error.
        #[source]
        source: serde_json::Error,
    },
    /// The credential could not be produced.
    #[error("{code}: credential for driver `{artifact}` is unavailable: {why}", code = Code::CredentialUnresolved)]
    Credential {
        /// Which driver.
        artifact: String,
        /// Why.
        why: String,
    },
    /// The spend meter refused the call before it was sent.
    #[error("{refusal}")]
    SpendRefused {
        /// Which ceiling and by how much.
        refusal: crate::spend::Refusal,
    },
    /// The gateway actor crashed or is gone; its supervisor restarts it.
    #[error(
        "{code}: the gateway for `{artifact}` crashed during the call and is being restarted; submit the task again", code = Code::ActorCrashed
    )]
    GatewayDown {
        /// Which driver.
        artifact: String,
    },
}

impl InferenceError {
    /// The code.
    pub fn code(&self) -> Code {
        match self {
            InferenceError::Guest(e) => e.code(),
            InferenceError::Driver { .. } | InferenceError::Unreachable { .. } => Code::InferenceFailed,
            InferenceError::Protocol { .. } => Code::DriverProtocol,
            InferenceError::Credential { .. } => Code::CredentialUnresolved,
            InferenceError::GatewayDown { .. } => Code::ActorCrashed,
            InferenceError::SpendRefused { refusal } => match refusal.limit {
                crate::spend::Limit::Session => Code::SessionCeiling,
                _ => Code::MachineCeiling,
            },
        }
    }
}

/// Why a step could not be journaled. The step is not taken (no tool runs, no provider is
/// called, nothing is answered as accepted) and the task ends with this error.
#[derive(Debug, thiserror::Error)]
pub enum JournalError {
    /// The journal actor did not answer.
    #[error("{code}: the journal could not be reached ({0}); the step was not taken", code = Code::JournalUnavailable)]
    Unreachable(#[from] crate::peer::PeerError),
    /// A line could not be written.
    #[error("{code}: {0}; the step was not taken: check the disk has room and the session folder is writable", code = Code::JournalUnavailable)]
    Write(#[from] crate::journal::WriteFailed),
    /// A message could not be serialized (not expected of the runtime's own types).
    #[error("{code}: a message could not be serialized for the journal ({0}); the step was not taken", code = Code::JournalUnavailable)]
    Serialize(#[source] serde_json::Error),
}
