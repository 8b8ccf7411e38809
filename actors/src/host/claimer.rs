//! [`Claimer`]: one per clustered host. Every sixth of the lease TTL it writes the host's
//! heartbeat to the cluster's host registry (its API and load), then lists the cluster's
//! session book and live leases, and claims each booked session whose lease has expired (its
//! host died, or was cut off for longer than the TTL): it fetches the capsule from the cluster's
//! store, resumes the session from its JetStream records by the resume rules
//! ([`Session::resume_from_cluster`]), hands it to the host as a new slot, and continues its
//! tasks. Several survivors may try at once; the lease's create lets exactly one win, and the
//! others skip the session. A claim that fails is logged and tried again at the next round.
//!
//! Rounds follow one another (the next is scheduled when one ends), so a slow round never
//! piles up. Sessions are tried in an order of this host's own, so survivors claiming at the
//! same moment tend to take different sessions first.

use capsule_protocol::host_file::PlannedCapsule;
use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::hash::{Hash, Hasher};
use std::sync::Arc;
use std::time::Duration;

use super::supervisor::HostMsg;
use super::{Adopted, Shared};
use crate::cluster::{ClusterError, ClusterHost, SessionEntry};
use crate::control::TokenKey;
use crate::error::LaunchError;
use crate::launch::LaunchOptions;
use crate::session::{KeptKeys, Session};

/// What the claimer is sent: its own round timer.
pub enum ClaimerMsg {
    /// Run one round, then schedule the next.
    Round,
}

/// What the claimer is started with.
pub struct ClaimerArgs {
    /// What every capsule of this host launches with (its cluster included).
    pub shared: Arc<Shared>,
    /// The host, which takes each claimed session as a slot.
    pub host: ActorRef<HostMsg>,
}

/// The claimer of a clustered host.
pub struct Claimer;

/// Enter `session` (of the capsule `spec`) in the cluster's book as this host's, with its
/// tokens' verification keys: its capsule is put in the cluster's store first (files already
/// there are not sent again). Returns the entry and its revision.
pub(crate) async fn book(
    c: &ClusterHost,
    spec: &PlannedCapsule,
    session: &Session,
) -> Result<(SessionEntry, u64), ClusterError> {
    let stored = c.files.submit(&spec.manifest, std::slice::from_ref(&spec.workdir)).await?;
    let entry = SessionEntry {
        capsule: spec.name.clone(),
        spec: stored.hash(),
        host: c.name.clone(),
        door: None,
        door_key: session.door_auth.as_ref().map(|d| d.key.to_hex()),
        control_key: session.control.as_ref().map(|c| c.key.to_hex()),
    };
    let revision = c.sessions.put(&session.session_id, &entry).await?;
    Ok((entry, revision))
}

/// The keys a claimed session keeps from its book entry. A key that is not one is dropped, and
/// the session mints a new token for it (its clients then need the new one).
fn kept_keys(session: &str, entry: &SessionEntry) -> KeptKeys {
    let key = |what: &str, hex: &Option<String>| {
        let hex = hex.as_deref()?;
        let key = TokenKey::from_hex(hex);
        if key.is_none() {
            tracing::warn!(session, "the session book's {what} key is not a key; a new token is minted");
        }
        key
    };
    KeptKeys { door: key("door", &entry.door_key), control: key("control", &entry.control_key) }
}

/// Why a claim did not happen.
#[derive(Debug, thiserror::Error)]
enum NotClaimed {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Launch(#[from] LaunchError),
    /// The resume, spawned on its shard, ended without an answer (it panicked).
    #[error("{code}: resuming the session on shard {shard} ended without an answer", code = capsule_protocol::Code::ActorCrashed)]
    Ended {
        shard: usize,
        #[source]
        source: tokio::task::JoinError,
    },
}

impl ClaimerArgs {
    fn cluster(&self) -> Option<&ClusterHost> {
        self.shared.cluster.as_ref()
    }

    /// Write this host's heartbeat to the registry: its API, its doors and its load (running
    /// sessions).
    async fn beat(&self, c: &ClusterHost) {
        let entries = match self.host.call(HostMsg::List, Some(Duration::from_secs(5))).await {
            Ok(ractor::rpc::CallResult::Success(e)) => e,
            _ => return,
        };
        let load = entries
            .iter()
            .filter(|e| matches!(e.state, super::CapsuleState::Running | super::CapsuleState::Starting))
            .count();
        let doors = entries
            .iter()
            .filter_map(|e| {
                let url = e.url.clone()?;
                Some(crate::cluster::HostDoor { capsule: e.name.clone(), session_id: e.session_id.clone(), url })
            })
            .collect();
        let entry = crate::cluster::HostEntry {
            name: c.name.clone(),
            api: c.api.get().cloned(),
            load: load as u32,
            doors,
            heartbeat_ms: crate::now_ms(),
        };
        if let Err(e) = c.hosts.beat(&entry).await {
            tracing::debug!(error = %e, "the heartbeat was not written; again next round");
        }
    }

    /// One round: the heartbeat, then claim every booked session nobody holds. The book and
    /// the leases are each listed once, so a round over sessions that are all held reads no
    /// session's entry or lease; only a session without a lease is read again, from the
    /// leaders, before it is claimed.
    async fn round(&self) {
        let Some(c) = self.cluster() else { return };
        self.beat(c).await;
        let mut unheld: Vec<String> = match (c.sessions.keys().await, c.leases.held().await) {
            (Ok(booked), Ok(held)) => booked.into_iter().filter(|s| !held.contains(s)).collect(),
            (Err(e), _) | (_, Err(e)) => {
                tracing::debug!(error = %e, "the session book or the leases could not be listed; trying again next round");
                return;
            }
        };
        unheld.sort_by_key(|session| {
            let mut h = std::collections::hash_map::DefaultHasher::new();
            (&c.name, session).hash(&mut h);
            h.finish()
        });
        for session in unheld {
            let (entry, revision) = match c.sessions.entry(&session).await {
                Ok(Some(found)) => found,
                Ok(None) => continue,
                Err(e) => {
                    tracing::debug!(session, error = %e, "cannot read the session's entry; trying again next round");
                    continue;
                }
            };
            match c.leases.holder(&session).await {
                Ok(None) => {}
                Ok(Some(_)) => continue,
                Err(e) => {
                    tracing::debug!(session, error = %e, "cannot read the lease; trying again next round");
                    continue;
                }
            }
            match self.claim(c, &session, &entry).await {
                Ok(()) => {}
                Err(NotClaimed::Cluster(e @ ClusterError::Held { .. }))
                | Err(NotClaimed::Launch(LaunchError::Cluster(e @ ClusterError::Held { .. }))) => {
                    tracing::debug!(session, error = %e, "another host claimed the session first");
                }
                Err(NotClaimed::Launch(LaunchError::AlreadyEnded { .. })) => {
                    // It ended as its host went: nothing to resume, and nothing to book.
                    let _ = c.sessions.remove(&session, revision).await;
                }
                Err(e) => {
                    tracing::warn!(session, capsule = entry.capsule, error = %e, "could not claim the session; trying again next round")
                }
            }
        }
    }

    /// Claim `session`: fetch its capsule, resume it here, hand it to the host, continue its
    /// tasks.
    async fn claim(&self, c: &ClusterHost, session: &str, entry: &SessionEntry) -> Result<(), NotClaimed> {
        let manifest = c.files.materialize(&entry.spec, &c.root.join("capsules")).await?;
        let workdir = c.root.join("sessions").join(&entry.capsule);
        let opts = LaunchOptions {
            cluster: Some(c.clone()),
            manifest: manifest.clone(),
            workdir: workdir.clone(),
            host: self.shared.host.clone(),
            env: self.shared.env.clone(),
            host_config: self.shared.host_config.clone(),
            machine: self.shared.machine.clone(),
            endpoint_override: None,
        };
        let kept = kept_keys(session, entry);
        // On a shard, as every capsule of a host with shards (`crate::shards`): the resumed
        // session's actors, and the task that continues its work, run there.
        let placement = self.shared.shards.as_ref().map(|s| s.place());
        // Boxed when first run, so the large future is allocated where it runs (as a slot's
        // launch is: `slot::open_placed`).
        let resume = {
            let session = session.to_string();
            async move { Box::pin(Session::resume_from_cluster(opts, &session, kept)).await }
        };
        let resumed = Arc::new(match &placement {
            None => resume.await?,
            Some(p) => {
                p.handle().spawn(resume).await.map_err(|source| NotClaimed::Ended { shard: p.index(), source })??
            }
        });
        tracing::info!(session, capsule = entry.capsule, from = entry.host, "claimed a session whose host was lost");
        let spec = PlannedCapsule { name: entry.capsule.clone(), manifest, workdir, port: 0 };
        let runs_on = placement.as_ref().map(|p| p.handle().clone());
        let adopted = Adopted { session: resumed.clone(), placement };
        let _ = self.host.cast(HostMsg::Adopt { spec, adopted });
        let continued = async move {
            if let Err(e) = resumed.resume_task().await {
                tracing::warn!(session = resumed.session_id, error = %e, "the claimed session's tasks did not finish");
            }
        };
        match runs_on {
            Some(shard) => drop(shard.spawn(continued)),
            None => drop(tokio::spawn(continued)),
        }
        Ok(())
    }
}

impl Actor for Claimer {
    type Msg = ClaimerMsg;
    type State = ClaimerArgs;
    type Arguments = ClaimerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<ClaimerMsg>,
        args: ClaimerArgs,
    ) -> Result<ClaimerArgs, ActorProcessingErr> {
        let _ = myself.cast(ClaimerMsg::Round);
        Ok(args)
    }

    async fn handle(
        &self,
        myself: ActorRef<ClaimerMsg>,
        msg: ClaimerMsg,
        state: &mut ClaimerArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ClaimerMsg::Round => {
                state.round().await;
                // A sixth of the TTL: a round is two listings, so running it twice as often as
                // the leases are renewed costs little and takes half a second off a failover.
                let every = state
                    .cluster()
                    .map_or(Duration::from_secs(1), |c| (c.leases.ttl() / 6).max(Duration::from_millis(100)));
                myself.send_after(every, || ClaimerMsg::Round);
            }
        }
        Ok(())
    }
}
