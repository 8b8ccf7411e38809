//! The cluster-wide daily spend (`spend.machine_tokens_per_day` on a clustered host): one KV
//! key per UTC day holding what every host settled and has reserved, changed only by
//! compare-and-set (a create for the day's first call, then updates naming the revision read).
//! A reservation is granted only when `settled + reserved + tokens ≤ ceiling` held at the
//! revision it replaced, so however the hosts interleave, admission never overshoots the
//! ceiling. A host that dies with reservations open leaves them counted: refusing too much is
//! the safe side.

use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

use super::ClusterError;

/// The bucket of daily totals.
pub const SPEND_BUCKET: &str = "CAPSULE_SPEND";

/// One day's totals across the cluster.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayTotals {
    /// Tokens settled.
    pub settled: u64,
    /// Tokens reserved by calls not settled yet.
    pub reserved: u64,
}

/// The cluster's daily spend.
#[derive(Debug, Clone)]
pub struct ClusterSpend {
    kv: kv::Store,
    js: jetstream::Context,
}

fn key(day: &str) -> String {
    format!("day-{day}")
}

impl ClusterSpend {
    /// Create the bucket (`replicas` copies), or take the one that exists.
    pub async fn open(js: &jetstream::Context, replicas: usize) -> Result<ClusterSpend, ClusterError> {
        let kv = super::kv_read::bucket(js, SPEND_BUCKET, replicas, None).await?;
        Ok(ClusterSpend { kv, js: js.clone() })
    }

    /// The day's totals.
    pub async fn totals(&self, day: &str) -> Result<DayTotals, ClusterError> {
        Ok(self.read(day).await?.map(|(t, _)| t).unwrap_or_default())
    }

    async fn read(&self, day: &str) -> Result<Option<(DayTotals, u64)>, ClusterError> {
        let k = key(day);
        let Some((value, revision)) = super::kv_read::latest(&self.js, SPEND_BUCKET, &k).await? else {
            return Ok(None);
        };
        let totals = serde_json::from_slice(&value).map_err(|e| ClusterError::BadEntry {
            subject: format!("{SPEND_BUCKET}/{k}"),
            sequence: revision,
            why: e.to_string(),
        })?;
        Ok(Some((totals, revision)))
    }

    /// Change the day's totals with `change` (given the current ones; `None`: leave them),
    /// retrying until the compare-and-set holds; what `change` decided.
    async fn change<F>(&self, day: &str, change: F) -> Result<Option<DayTotals>, ClusterError>
    where
        F: Fn(DayTotals) -> Option<DayTotals>,
    {
        let k = key(day);
        loop {
            // A read changes nothing, so it is tried again while JetStream does not answer; a
            // write is not (it may have been stored with its answer lost).
            let current = super::log::patiently(|| self.read(day)).await?;
            let Some(next) = change(current.map(|(t, _)| t).unwrap_or_default()) else { return Ok(None) };
            let value: bytes::Bytes = serde_json::to_vec(&next).unwrap_or_default().into();
            let written = match current {
                None => self.kv.create(&k, value).await.map(|_| ()).map_err(|e| {
                    let conflict = e.kind() == kv::CreateErrorKind::AlreadyExists || super::wrong_last_sequence(&e);
                    (conflict, ClusterError::js(format!("write {k}"), e))
                }),
                Some((_, revision)) => self.kv.update(&k, value, revision).await.map(|_| ()).map_err(|e| {
                    let conflict = e.kind() == kv::UpdateErrorKind::WrongLastRevision || super::wrong_last_sequence(&e);
                    (conflict, ClusterError::js(format!("write {k}"), e))
                }),
            };
            match written {
                Ok(()) => return Ok(Some(next)),
                // Another host changed the day in between: read again and decide again.
                Err((true, _)) => continue,
                Err((false, e)) => return Err(e),
            }
        }
    }

    /// Reserve `tokens` on `day` under `ceiling`: `Ok(Err(used))` when it would pass it.
    pub async fn reserve(&self, day: &str, tokens: u64, ceiling: u64) -> Result<Result<(), u64>, ClusterError> {
        let used = std::sync::atomic::AtomicU64::new(0);
        let granted = self
            .change(day, |t| {
                let now = t.settled.saturating_add(t.reserved);
                used.store(now, std::sync::atomic::Ordering::Relaxed);
                (now.saturating_add(tokens) <= ceiling).then_some(DayTotals { reserved: t.reserved + tokens, ..t })
            })
            .await?;
        Ok(if granted.is_some() { Ok(()) } else { Err(used.load(std::sync::atomic::Ordering::Relaxed)) })
    }

    /// A reservation of `reserved` ended: `spent` of it (at most all of it) is settled.
    pub async fn settle(&self, day: &str, reserved: u64, spent: u64) -> Result<(), ClusterError> {
        self.change(day, |t| {
            Some(DayTotals {
                settled: t.settled.saturating_add(spent.min(reserved)),
                reserved: t.reserved.saturating_sub(reserved),
            })
        })
        .await
        .map(|_| ())
    }
}
