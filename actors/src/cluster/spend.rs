//! The cluster-wide daily spend (`spend.machine_tokens_per_day` on a clustered host): one KV
//! key per UTC day holding what every host settled and has reserved, changed only by
//! compare-and-set (a create for the day's first call, then updates naming the revision read).
//! A reservation is granted only when `settled + reserved + tokens ≤ ceiling` held at the
//! revision it replaced, so however the hosts interleave, admission never overshoots the
//! ceiling. A host that dies with reservations open leaves them counted: refusing too much is
//! the safe side.
//!
//! Each open reservation is named in the day's value by an id unique to its meter. That makes
//! every change safe to try again when its answer was lost (a leader election, a dropped
//! connection): the next try reads the day again and sees whether the change is in it (the id
//! is there for a reservation, gone for a settlement) before writing anything. A write is tried
//! again for as long as JetStream does not answer ([`PATIENCE`](super::log::PATIENCE)).

use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

use super::ClusterError;

/// The bucket of daily totals.
pub const SPEND_BUCKET: &str = "CAPSULE_SPEND";

/// One day's totals across the cluster.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct DayTotals {
    /// Tokens settled.
    pub settled: u64,
    /// Tokens reserved by calls not settled yet.
    pub reserved: u64,
    /// The open reservations: id → tokens (their sum is `reserved`, except for reservations a
    /// version without ids made, which stay counted until the day ends).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub open: std::collections::BTreeMap<String, u64>,
}

/// What a change makes of the day it read.
enum Step {
    /// Write these totals (compare-and-set against the revision read).
    Write(DayTotals),
    /// Write nothing: the change is already in, or refused.
    Stop,
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

/// Where the day totals are kept: the KV bucket (or a test's stand-in that loses answers).
pub(crate) trait DayStore {
    /// The day's totals and their revision; `None` before the day's first call.
    async fn read(&self, day: &str) -> Result<Option<(DayTotals, u64)>, ClusterError>;
    /// Write the day's totals: a create when `revision` is `None`, else an update naming it.
    /// `Err((true, _))` is a conflict (another change came first); any other error may or may
    /// not have been stored.
    async fn write(&self, day: &str, next: &DayTotals, revision: Option<u64>) -> Result<(), (bool, ClusterError)>;
}

impl DayStore for ClusterSpend {
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

    async fn write(&self, day: &str, next: &DayTotals, revision: Option<u64>) -> Result<(), (bool, ClusterError)> {
        let k = key(day);
        let value: bytes::Bytes = serde_json::to_vec(next).unwrap_or_default().into();
        match revision {
            None => self.kv.create(&k, value).await.map(|_| ()).map_err(|e| {
                let conflict = e.kind() == kv::CreateErrorKind::AlreadyExists || super::wrong_last_sequence(&e);
                (conflict, ClusterError::js(format!("write {k}"), e))
            }),
            Some(revision) => self.kv.update(&k, value, revision).await.map(|_| ()).map_err(|e| {
                let conflict = e.kind() == kv::UpdateErrorKind::WrongLastRevision || super::wrong_last_sequence(&e);
                (conflict, ClusterError::js(format!("write {k}"), e))
            }),
        }
    }
}

/// Change `day`'s totals in `store` with `change` (given the current ones), until the
/// compare-and-set holds or `change` stops. A write whose answer is not a conflict (it may or
/// may not have been stored) is tried again from a fresh read, for as long as JetStream does
/// not answer: `change` must see from the day whether it is already in.
async fn change<S: DayStore, F: Fn(&DayTotals) -> Step>(store: &S, day: &str, change: F) -> Result<(), ClusterError> {
    let deadline = tokio::time::Instant::now() + super::log::PATIENCE;
    loop {
        let current = super::log::patiently(|| store.read(day)).await?;
        let Step::Write(next) = change(current.as_ref().map(|(t, _)| t).unwrap_or(&DayTotals::default())) else {
            return Ok(());
        };
        match store.write(day, &next, current.map(|(_, r)| r)).await {
            Ok(()) => return Ok(()),
            // Another host changed the day in between: read again and decide again.
            Err((true, _)) => continue,
            Err((false, e)) if tokio::time::Instant::now() < deadline => {
                tracing::debug!(error = %e, "spend: a change of the day total got no answer; reading it again");
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            Err((false, e)) => return Err(e),
        }
    }
}

/// Reserve `tokens` as `id` under `ceiling` (see [`ClusterSpend::reserve`]).
async fn reserve<S: DayStore>(
    store: &S,
    day: &str,
    id: &str,
    tokens: u64,
    ceiling: u64,
) -> Result<Result<(), u64>, ClusterError> {
    let refused = std::sync::Mutex::new(None);
    change(store, day, |t| {
        *refused.lock().unwrap_or_else(|p| p.into_inner()) = None;
        if t.open.contains_key(id) {
            return Step::Stop;
        }
        let used = t.settled.saturating_add(t.reserved);
        if used.saturating_add(tokens) > ceiling {
            *refused.lock().unwrap_or_else(|p| p.into_inner()) = Some(used);
            return Step::Stop;
        }
        let mut next = t.clone();
        next.reserved = t.reserved.saturating_add(tokens);
        next.open.insert(id.to_string(), tokens);
        Step::Write(next)
    })
    .await?;
    Ok(match refused.into_inner().unwrap_or_else(|p| p.into_inner()) {
        Some(used) => Err(used),
        None => Ok(()),
    })
}

/// Settle `spent` of the reservation `id` (see [`ClusterSpend::settle`]).
async fn settle<S: DayStore>(store: &S, day: &str, id: &str, spent: u64) -> Result<(), ClusterError> {
    change(store, day, |t| {
        let Some(&reserved) = t.open.get(id) else { return Step::Stop };
        let mut next = t.clone();
        next.open.remove(id);
        next.settled = t.settled.saturating_add(spent.min(reserved));
        next.reserved = t.reserved.saturating_sub(reserved);
        Step::Write(next)
    })
    .await
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

    /// Reserve `tokens` on `day` under `ceiling`, as the reservation `id` (unique to its
    /// meter): `Ok(Err(used))` when it would pass it. Asked again with the same id, it grants
    /// once.
    pub async fn reserve(
        &self,
        day: &str,
        id: &str,
        tokens: u64,
        ceiling: u64,
    ) -> Result<Result<(), u64>, ClusterError> {
        reserve(self, day, id, tokens, ceiling).await
    }

    /// The reservation `id` ended: `spent` of it (at most all of it) is settled. Asked again,
    /// or for an id the day does not hold, it changes nothing.
    pub async fn settle(&self, day: &str, id: &str, spent: u64) -> Result<(), ClusterError> {
        settle(self, day, id, spent).await
    }
}

#[cfg(test)]
#[path = "spend_tests.rs"]
mod tests;
