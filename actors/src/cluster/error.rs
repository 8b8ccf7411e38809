//! Errors of the cluster layer, each with its code; causes are kept whole.

use capsule_protocol::Code;

/// A boxed cause from the NATS client.
pub type Cause = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a cluster operation failed.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// No server of the list answered at start.
    #[error(
        "{code}: cannot reach NATS at {urls}; start nats-server with JetStream (`nats-server -js`) there, or fix --cluster",
        code = Code::ClusterUnreachable
    )]
    Unreachable {
        /// The URLs tried.
        urls: String,
        /// The client's error.
        #[source]
        source: Cause,
    },
    /// JetStream refused or did not answer an operation.
    #[error("{code}: JetStream could not {what}; check that the cluster has a JetStream quorum", code = Code::ClusterUnavailable)]
    JetStream {
        /// What was attempted.
        what: String,
        /// The client's error.
        #[source]
        source: Cause,
    },
    /// An append named a last sequence the subject no longer has: another owner wrote since.
    #[error(
        "{code}: the append to {subject} was refused: it expected entry #{expected} to be the last, so another host owns the session now; this host stops the session and writes nothing more",
        code = Code::ClusterFenced
    )]
    Fenced {
        /// The subject.
        subject: String,
        /// The last sequence this writer knew.
        expected: u64,
    },
    /// An entry is not a journal line (not a JSON object).
    #[error(
        "{code}: entry #{sequence} of {subject} is not a journal line ({why}); it was not written by this runtime, so the session is not read past it",
        code = Code::ClusterBadEntry
    )]
    BadEntry {
        /// The subject.
        subject: String,
        /// Its stream sequence.
        sequence: u64,
        /// What is wrong.
        why: String,
    },
    /// Another host holds the session's lease.
    #[error("{code}: session {session} is owned by host {holder} (lease epoch {epoch})", code = Code::LeaseHeld)]
    Held {
        /// The session.
        session: String,
        /// The holder.
        holder: String,
        /// Its epoch.
        epoch: u64,
    },
    /// The lease could not be renewed: it expired or another host took it.
    #[error(
        "{code}: host {host} lost its lease on session {session} (epoch {epoch}); it stops the session and writes nothing more",
        code = Code::LeaseLost
    )]
    Lost {
        /// The session.
        session: String,
        /// This host.
        host: String,
        /// The epoch it held.
        epoch: u64,
    },
    /// A capsule folder that cannot be kept in the cluster, or a stored capsule that does not
    /// check out.
    #[error("{code}: the capsule at {what} cannot be used: {why}", code = Code::ClusterBadCapsule)]
    BadCapsule {
        /// The folder, file or object.
        what: String,
        /// What is wrong.
        why: String,
    },
    /// A capsule file could not be read or written on this host.
    #[error("{code}: cannot read or write {}", path.display(), code = Code::ClusterBadCapsule)]
    Files {
        /// The file.
        path: std::path::PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A session id that cannot be a subject token.
    #[error("{code}: `{session}` cannot name a session in the cluster (letters, digits, `_` and `-` only)", code = Code::ClusterBadEntry)]
    BadSession {
        /// The id.
        session: String,
    },
}

/// Whether `e` (or a cause of it) is JetStream refusing a write whose expected last sequence
/// or revision no longer holds. A clustered stream answers that as code 10071 or 10164; the
/// client names only the first, so both are recognised here.
pub fn wrong_last_sequence(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cause = Some(e);
    while let Some(c) = cause {
        if let Some(js) = c.downcast_ref::<async_nats::jetstream::Error>()
            && matches!(js.error_code().0, 10071 | 10164)
        {
            return true;
        }
        cause = c.source();
    }
    false
}

impl ClusterError {
    /// The diagnostic code.
    pub fn code(&self) -> Code {
        match self {
            ClusterError::Unreachable { .. } => Code::ClusterUnreachable,
            ClusterError::JetStream { .. } => Code::ClusterUnavailable,
            ClusterError::Fenced { .. } => Code::ClusterFenced,
            ClusterError::BadEntry { .. } | ClusterError::BadSession { .. } => Code::ClusterBadEntry,
            ClusterError::Held { .. } => Code::LeaseHeld,
            ClusterError::Lost { .. } => Code::LeaseLost,
            ClusterError::BadCapsule { .. } | ClusterError::Files { .. } => Code::ClusterBadCapsule,
        }
    }

    pub(crate) fn js(what: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> ClusterError {
        ClusterError::JetStream { what: what.into(), source: Box::new(source) }
    }
}
