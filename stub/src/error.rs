//! The stub's error type.
//!
//! Every variant says what the stub was doing; the underlying cause stays attached as the error
//! source instead of being pasted into the message, so callers that print the chain (for example
//! with `anyhow`'s `{:#}`) see both. Failures of individual requests are not errors of this type:
//! they are HTTP answers, because the stub's job is to answer.

use std::net::SocketAddr;
use std::path::PathBuf;

/// Why the stub could not load its script, start, or keep serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StubError {
    /// The script text is not valid YAML/JSON or does not match the script format.
    #[error("the stub script does not parse")]
    ParseScript {
        /// The parser's error, with its location.
        #[source]
        source: Box<serde_saphyr::Error>,
    },
    /// The script parsed but asks for something the stub cannot do.
    #[error("the stub script is invalid: {reason}")]
    InvalidScript {
        /// What is wrong, naming the field.
        reason: String,
    },
    /// The script file could not be read.
    #[error("cannot read stub script {}", path.display())]
    ReadScriptFile {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The script file was read but its content was refused.
    #[error("stub script {} is not a valid script", path.display())]
    ScriptFile {
        /// The file.
        path: PathBuf,
        /// The parse or validation error.
        #[source]
        source: Box<StubError>,
    },
    /// A raw turn's `body_file` could not be read when the stub started.
    #[error("cannot read the body file {} of raw turn {turn}", path.display())]
    ReadRawBody {
        /// The script turn (from 0).
        turn: usize,
        /// The file, as resolved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The stub was started outside a tokio runtime.
    #[error("the stub must be started from inside a tokio runtime")]
    NoRuntime {
        /// Tokio's error.
        #[source]
        source: tokio::runtime::TryCurrentError,
    },
    /// The listening socket could not be set up.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Waiting for ctrl-c failed.
    #[error("cannot wait for ctrl-c")]
    Signal {
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The server task ended abnormally.
    #[error("the stub server stopped unexpectedly")]
    Serve {
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
}
