//! One lease per session in a KV bucket: which host owns it, and since when (the epoch).
//!
//! - A host takes a session with a KV **create**, which only one caller can win.
//! - It keeps the lease by **updating** the key with the revision it last wrote, before the
//!   bucket's `max_age` (the TTL, default 3 s) removes it. An update with a stale revision
//!   fails: the lease was taken over, and the host must stop the session.
//! - A lease not renewed within the TTL expires; another host's create then wins.
//! - The epoch is the revision of the winning create: the bucket's revisions only grow, so a
//!   later owner always has a higher epoch.

use async_nats::jetstream::{self, kv};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::ClusterError;

/// The bucket of session leases.
pub const LEASE_BUCKET: &str = "CAPSULE_LEASES";

/// How long a lease lives without a renewal.
pub const DEFAULT_TTL: Duration = Duration::from_secs(3);

/// A lease's value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LeaseRecord {
    /// The owner.
    pub host: String,
    /// When it took the session (the create's revision).
    pub epoch: u64,
}

/// The lease bucket.
#[derive(Debug, Clone)]
pub struct Leases {
    kv: kv::Store,
    js: jetstream::Context,
    ttl: Duration,
}

/// A lease this host holds.
#[derive(Debug)]
pub struct Lease {
    kv: kv::Store,
    session: String,
    record: LeaseRecord,
    revision: u64,
    /// When the last write of it that got through was sent: JetStream stored it later, so the
    /// lease lasts at least a TTL from here.
    renewed: tokio::time::Instant,
    /// When the first write since then that got no answer was sent (the answer lost with a
    /// connection, or the caller stopped waiting): it may have been stored.
    unsure_since: Option<tokio::time::Instant>,
    js: jetstream::Context,
}

impl Leases {
    /// Create the bucket (TTL `ttl`, `replicas` copies), or take the one that exists.
    pub async fn open(js: &jetstream::Context, replicas: usize, ttl: Duration) -> Result<Leases, ClusterError> {
        let kv = super::kv_read::bucket(js, LEASE_BUCKET, replicas, Some(ttl)).await?;
        Ok(Leases { kv, js: js.clone(), ttl })
    }

    /// The TTL.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Take `session` for `host`: exactly one of several hosts asking at once wins; the others
    /// learn who holds it.
    pub async fn acquire(&self, session: &str, host: &str) -> Result<Lease, ClusterError> {
        let asked = tokio::time::Instant::now();
        let placeholder = encode(&LeaseRecord { host: host.to_string(), epoch: 0 });
        // Tried again while JetStream does not answer (a cluster still electing its leaders).
        let created = super::log::patiently(|| async {
            match self.kv.create(session, placeholder.clone()).await {
                Ok(revision) => Ok(Some(revision)),
                Err(e) if e.kind() == kv::CreateErrorKind::AlreadyExists || super::wrong_last_sequence(&e) => Ok(None),
                Err(e) => Err(ClusterError::js(format!("create the lease of {session}"), e)),
            }
        })
        .await?;
        let revision = match created {
            Some(revision) => revision,
            None => match super::kv_read::latest(&self.js, LEASE_BUCKET, session).await? {
                // An earlier try of this create was stored but its answer lost: it is ours.
                Some((value, revision)) if value == placeholder => revision,
                _ => {
                    let holder = self.holder(session).await?;
                    let (holder, epoch) = holder.map(|h| (h.host, h.epoch)).unwrap_or_else(|| ("(expiring)".into(), 0));
                    return Err(ClusterError::Held { session: session.to_string(), holder, epoch });
                }
            },
        };
        let record = LeaseRecord { host: host.to_string(), epoch: revision };
        let mut lease = Lease {
            kv: self.kv.clone(),
            session: session.to_string(),
            record,
            revision,
            renewed: asked,
            unsure_since: None,
            js: self.js.clone(),
        };
        lease.renew().await?;
        Ok(lease)
    }

    /// The sessions whose lease is live, in one listing of the bucket (a lease that expired is
    /// gone from it). The listing may be a moment behind; [`Leases::holder`] reads one lease from
    /// the bucket's leader.
    pub async fn held(&self) -> Result<std::collections::HashSet<String>, ClusterError> {
        Ok(super::kv_read::keys(&self.kv, "list the leases").await?.into_iter().collect())
    }

    /// Who holds `session` now, if anyone.
    pub async fn holder(&self, session: &str) -> Result<Option<LeaseRecord>, ClusterError> {
        let Some((value, revision)) = super::kv_read::latest(&self.js, LEASE_BUCKET, session).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&value).map(Some).map_err(|e| ClusterError::BadEntry {
            subject: format!("{LEASE_BUCKET}/{session}"),
            sequence: revision,
            why: e.to_string(),
        })
    }
}

fn encode(r: &LeaseRecord) -> Bytes {
    serde_json::to_vec(r).unwrap_or_default().into()
}

impl Lease {
    /// The lease's value.
    pub fn record(&self) -> &LeaseRecord {
        &self.record
    }

    /// When the last write of the lease that got through was sent (its create, or a renewal):
    /// by this host's clock the lease lasts at least a TTL from then.
    pub fn renewed(&self) -> tokio::time::Instant {
        self.renewed
    }

    /// Renew it; `Lost` when it expired or another host took it since the last renewal.
    ///
    /// A write whose answer never came may still have been stored, and the next one, sent with
    /// the revision before it, is then refused. So a refusal after such a write reads the key
    /// from the bucket's leader: a newer revision holding this lease's own record is that write
    /// (no other writer writes this host's record with this epoch), taken as renewed when it
    /// was sent, and the renewal is made again from it. Anything else there is another owner.
    /// Dropping the future part way (a caller's timeout) leaves the write counted as unsure.
    pub async fn renew(&mut self) -> Result<(), ClusterError> {
        loop {
            let sent = tokio::time::Instant::now();
            let earlier = self.unsure_since;
            self.unsure_since = Some(earlier.unwrap_or(sent));
            match self.kv.update(&self.session, encode(&self.record), self.revision).await {
                Ok(revision) => {
                    (self.revision, self.renewed, self.unsure_since) = (revision, sent, None);
                    return Ok(());
                }
                Err(e) if e.kind() == kv::UpdateErrorKind::WrongLastRevision || super::wrong_last_sequence(&e) => {
                    // Refused: this write was not stored.
                    self.unsure_since = earlier;
                    let Some(since) = earlier else { return Err(self.lost()) };
                    match super::kv_read::latest(&self.js, LEASE_BUCKET, &self.session).await? {
                        Some((value, revision)) if revision > self.revision && value == encode(&self.record) => {
                            tracing::warn!(
                                session = self.session,
                                revision,
                                "a renewal whose answer was lost had been stored; renewing from it"
                            );
                            (self.revision, self.renewed, self.unsure_since) = (revision, since, None);
                        }
                        _ => return Err(self.lost()),
                    }
                }
                Err(e) => return Err(ClusterError::js(format!("renew the lease of {}", self.session), e)),
            }
        }
    }

    /// The error that says this lease is lost (`E-CLU-006`).
    pub(crate) fn lost(&self) -> ClusterError {
        ClusterError::Lost { session: self.session.clone(), host: self.record.host.clone(), epoch: self.record.epoch }
    }

    /// Give the session up (only if this host still holds it).
    pub async fn release(self) -> Result<(), ClusterError> {
        self.kv
            .delete_expect_revision(&self.session, Some(self.revision))
            .await
            .map_err(|e| ClusterError::js(format!("release the lease of {}", self.session), e))
    }
}
