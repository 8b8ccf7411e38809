//! The lease keeper: one per clustered session, under the capsule supervisor. It renews the
//! session's lease every third of its TTL. It stops the whole session at once when a renewal
//! is refused (the lease expired or another host took it), and also when no renewal got
//! through within a TTL of the last one sent that did (NATS unreachable or too slow): by its
//! own clock the lease may be gone by then, and the session stops before another host could
//! claim it. Nothing more is written; the fenced journal would refuse it anyway. A try that gets
//! no answer within a renewal period is given up and made again, so one answer lost with a
//! connection does not use up the TTL.

use ractor::{Actor, ActorProcessingErr, ActorRef};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::Mutex;

use crate::cluster::{ClusterError, Lease};

/// What the keeper is told: renew now (its own timer).
pub enum KeeperMsg {
    /// Renew the lease.
    Renew,
}

/// What the keeper is started (and restarted) with: the one lease, shared across restarts.
#[derive(Clone)]
pub struct KeeperArgs {
    /// Session id.
    pub session_id: String,
    /// The lease.
    pub lease: Arc<Mutex<Lease>>,
    /// How often to renew.
    pub every: Duration,
    /// The lease's TTL: how long after the last renewal that got through the session may go on.
    pub ttl: Duration,
}

impl KeeperArgs {
    /// The keeper of `lease` (taken by `c` for `session_id`): it renews every third of the
    /// TTL. Also returns what `session_start` records of the ownership: host, epoch, TTL.
    pub fn new(c: &crate::cluster::ClusterHost, session_id: &str, lease: Lease) -> (KeeperArgs, serde_json::Value) {
        let ttl = c.leases.ttl();
        let fields =
            serde_json::json!({"host": c.name, "epoch": lease.record().epoch, "lease_ttl_ms": ttl.as_millis() as u64});
        let every = (ttl / 3).max(Duration::from_millis(50));
        let args = KeeperArgs { session_id: session_id.to_string(), lease: Arc::new(Mutex::new(lease)), every, ttl };
        (args, fields)
    }
}

/// The lease keeper.
pub struct LeaseKeeper;

impl Actor for LeaseKeeper {
    type Msg = KeeperMsg;
    type State = KeeperArgs;
    type Arguments = KeeperArgs;

    async fn pre_start(&self, myself: ActorRef<KeeperMsg>, args: KeeperArgs) -> Result<KeeperArgs, ActorProcessingErr> {
        myself.send_interval(args.every, || KeeperMsg::Renew);
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<KeeperMsg>,
        msg: KeeperMsg,
        state: &mut KeeperArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            KeeperMsg::Renew => {
                let mut lease = state.lease.lock().await;
                // The server counts the TTL from when it stored the last write that got
                // through, which is after this host sent it: by this clock (kept in the lease,
                // so across restarts of the keeper) the lease lasts at least until here.
                let deadline = lease.renewed() + state.ttl;
                // One try waits a renewal period at most: an answer lost with a connection
                // would otherwise hold the keeper until the TTL ran out, while a try made after
                // the client reconnected gets through (`Lease::renew` then finds whether the
                // lost one was stored).
                let attempt = deadline.min(tokio::time::Instant::now() + state.every);
                let renewed = tokio::time::timeout_at(attempt, lease.renew()).await;
                let lost = lease.lost();
                drop(lease);
                match renewed {
                    Ok(Ok(())) => {}
                    Ok(Err(e @ ClusterError::Lost { .. })) => stop_session(&state.session_id, &e, Ended::Refused),
                    // NATS unreachable for a moment: tried again at the next tick while the
                    // lease lasts by this host's clock.
                    Ok(Err(e)) if tokio::time::Instant::now() < deadline => {
                        tracing::warn!(session = state.session_id, error = %e, "the lease was not renewed this time")
                    }
                    Ok(Err(e)) => stop_session(&state.session_id, &lost, Ended::NotRenewed(Some(&e))),
                    Err(_elapsed) if tokio::time::Instant::now() < deadline => {
                        tracing::warn!(
                            session = state.session_id,
                            "a lease renewal got no answer within a renewal period; trying again"
                        )
                    }
                    Err(_elapsed) => stop_session(&state.session_id, &lost, Ended::NotRenewed(None)),
                }
            }
        }
        Ok(())
    }
}

/// How a session's lease ended.
enum Ended<'a> {
    /// A renewal was refused.
    Refused,
    /// No renewal got through within the TTL (the last one's failure, if it failed).
    NotRenewed(Option<&'a ClusterError>),
}

fn stop_session(session_id: &str, why: &ClusterError, ended: Ended<'_>) {
    // Nothing more is written once the lease is lost, not even a trace line: the session's
    // records belong to the new owner now. The host's log says what happened.
    let code = why.code().as_str();
    match ended {
        Ended::Refused => {
            tracing::error!(session = session_id, code, error = %why, "the session's lease is lost; stopping it")
        }
        Ended::NotRenewed(Some(cause)) => {
            tracing::error!(session = session_id, code, error = %why, cause = %cause, "the lease was not renewed within its TTL; stopping the session")
        }
        Ended::NotRenewed(None) => {
            tracing::error!(session = session_id, code, error = %why, "the lease was not renewed within its TTL (no answer); stopping the session")
        }
    }
    let supervisor = crate::names::name(session_id, crate::names::role::SUPERVISOR);
    if let Some(sup) = ractor::registry::where_is(supervisor) {
        sup.stop(Some(format!("lease lost: {why}")));
    }
}
