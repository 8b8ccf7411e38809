//! The book of the cluster's live sessions: a KV bucket with one key per session, saying which
//! capsule it runs (its spec's hash in the capsule store), which host runs it, and its door.
//!
//! A host writes a session's entry once it holds the lease and before the session's door
//! opens, so any session a client could have given a task to is in the book. It removes the
//! entry when the session ends gracefully or crashes (its own restart policy takes over). An
//! entry whose lease has expired is therefore a session whose host died or was cut off: the
//! survivors claim it (`host::claimer`).

use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

use super::ClusterError;

/// The bucket of live sessions.
pub const SESSIONS_BUCKET: &str = "CAPSULE_SESSIONS";

/// One live session.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionEntry {
    /// The capsule's name.
    pub capsule: String,
    /// Its spec's hash in the capsule store.
    pub spec: String,
    /// The host running it.
    pub host: String,
    /// Its door's URL on that host.
    pub door: Option<String>,
    /// The door token's verification key (hex SHA-256), so that a host that claims the session
    /// accepts the token its clients already hold. Never the token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub door_key: Option<String>,
    /// The control token's verification key, kept the same way.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub control_key: Option<String>,
}

/// The session book.
#[derive(Debug, Clone)]
pub struct Sessions {
    kv: kv::Store,
    js: jetstream::Context,
}

impl Sessions {
    /// Create the bucket (`replicas` copies), or take the one that exists.
    pub async fn open(js: &jetstream::Context, replicas: usize) -> Result<Sessions, ClusterError> {
        Ok(Sessions { kv: super::kv_read::bucket(js, SESSIONS_BUCKET, replicas, None).await?, js: js.clone() })
    }

    /// `session`'s entry, read from the bucket's leader; `None` when it is not booked.
    pub async fn get(&self, js: &jetstream::Context, session: &str) -> Result<Option<SessionEntry>, ClusterError> {
        let Some((value, revision)) = super::kv_read::latest(js, SESSIONS_BUCKET, session).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&value).map(Some).map_err(|e| ClusterError::BadEntry {
            subject: format!("{SESSIONS_BUCKET}/{session}"),
            sequence: revision,
            why: e.to_string(),
        })
    }

    /// Write `session`'s entry; returns its revision.
    pub async fn put(&self, session: &str, entry: &SessionEntry) -> Result<u64, ClusterError> {
        super::subject(session, super::Record::Trace)?;
        let value = serde_json::to_vec(entry).unwrap_or_default();
        super::log::patiently(|| async {
            self.kv
                .put(session, value.clone().into())
                .await
                .map_err(|e| ClusterError::js(format!("record session {session}"), e))
        })
        .await
    }

    /// Remove `session`'s entry (it ended), unless it changed since `revision` (another host
    /// claimed the session and wrote its own).
    pub async fn remove(&self, session: &str, revision: u64) -> Result<(), ClusterError> {
        self.kv
            .purge_expect_revision(session, Some(revision))
            .await
            .map_err(|e| ClusterError::js(format!("remove session {session}"), e))
    }

    /// Every live session, its entry and the entry's revision, each read from the bucket's
    /// leader (a session booked before the listing is in it). An entry in another format is
    /// skipped and logged: it names no capsule this runtime could run.
    pub async fn list(&self) -> Result<Vec<(String, SessionEntry, u64)>, ClusterError> {
        let stream = super::kv_read::stream_of(&self.js, SESSIONS_BUCKET, || "list the sessions".into()).await?;
        let mut out = Vec::new();
        for key in self.keys().await? {
            let read = super::kv_read::latest_in(&stream, SESSIONS_BUCKET, &key).await?;
            if let Some((entry, revision)) = read.and_then(|(value, revision)| parsed(&key, &value, revision)) {
                out.push((key, entry, revision));
            }
        }
        Ok(out)
    }

    /// Every booked session's id, in one listing of the bucket.
    pub async fn keys(&self) -> Result<Vec<String>, ClusterError> {
        super::kv_read::keys(&self.kv, "list the sessions").await
    }

    /// `session`'s entry and its revision, read from the bucket's leader; `None` when it is not
    /// booked, or (logged) when the entry is in another format.
    pub async fn entry(&self, session: &str) -> Result<Option<(SessionEntry, u64)>, ClusterError> {
        let read = super::kv_read::latest(&self.js, SESSIONS_BUCKET, session).await?;
        Ok(read.and_then(|(value, revision)| parsed(session, &value, revision)))
    }
}

/// A session entry read at `revision`; `None` (logged) when it is in another format.
fn parsed(session: &str, value: &[u8], revision: u64) -> Option<(SessionEntry, u64)> {
    match serde_json::from_slice::<SessionEntry>(value) {
        Ok(entry) => Some((entry, revision)),
        Err(e) => {
            tracing::warn!(session, error = %e, "{}: a session entry not in this runtime's format is skipped", capsule_protocol::Code::ClusterBadEntry);
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_without_token_keys_still_reads_and_one_with_none_writes_none() {
        let old = r#"{"capsule":"c","spec":"abc","host":"h0","door":"http://127.0.0.1:1/"}"#;
        let entry: SessionEntry = serde_json::from_str(old).expect("an earlier entry reads");
        assert_eq!((entry.door_key.as_deref(), entry.control_key.as_deref()), (None, None));
        assert_eq!(serde_json::to_string(&entry).expect("json"), old, "no key fields are written when absent");
        let keyed = SessionEntry { door_key: Some("ab".repeat(32)), ..entry };
        let back: SessionEntry = serde_json::from_str(&serde_json::to_string(&keyed).expect("json")).expect("reads");
        assert_eq!(back, keyed);
    }
}
