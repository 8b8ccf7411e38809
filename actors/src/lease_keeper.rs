//! The lease keeper: one per clustered session, under the capsule supervisor. It renews the
//! session's lease every third of its TTL. It stops the whole session at once when a renewal
//! is refused (the lease expired or another host took it), and also when no renewal got
//! through within a TTL of the last one sent that did (NATS unreachable or too slow): by its
//! own clock the lease may be gone by then, and the session stops before another host could
//! claim it. Nothing more is written; the fenced journal would refuse it anyway.

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

/// The keeper's state: its arguments, and when the last renewal that got through was sent.
pub struct KeeperState {
    args: KeeperArgs,
    renewed: tokio::time::Instant,
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
    type State = KeeperState;
    type Arguments = KeeperArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<KeeperMsg>,
        args: KeeperArgs,
    ) -> Result<KeeperState, ActorProcessingErr> {
        myself.send_interval(args.every, || KeeperMsg::Renew);
        // The lease was taken (or last renewed by a keeper before a restart) no earlier than
        // a renewal period ago.
        let renewed = tokio::time::Instant::now().checked_sub(args.every).unwrap_or_else(tokio::time::Instant::now);
        Ok(KeeperState { args, renewed })
    }

    async fn handle(
        &self,
        _myself: ActorRef<KeeperMsg>,
        msg: KeeperMsg,
        state: &mut KeeperState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            KeeperMsg::Renew => {
                let sent = tokio::time::Instant::now();
                // The server counts the TTL from when it stored the last renewal, which is
                // after this host sent it: by this clock the lease lasts at least until here.
                let deadline = state.renewed + state.args.ttl;
                let lease = state.args.lease.clone();
                let renewed = tokio::time::timeout_at(deadline, async move { lease.lock().await.renew().await }).await;
                let lost = |lease: &Lease| ClusterError::Lost {
                    session: state.args.session_id.clone(),
                    host: lease.record().host.clone(),
                    epoch: lease.record().epoch,
                };
                match renewed {
                    Ok(Ok(())) => state.renewed = sent,
                    Ok(Err(e @ ClusterError::Lost { .. })) => {
                        stop_session(&state.args.session_id, &e, Ended::Refused).await
                    }
                    // NATS unreachable for a moment: tried again at the next tick while the
                    // lease lasts by this host's clock.
                    Ok(Err(e)) if tokio::time::Instant::now() < deadline => {
                        tracing::warn!(session = state.args.session_id, error = %e, "the lease was not renewed this time")
                    }
                    Ok(Err(e)) => {
                        let why = lost(&*state.args.lease.lock().await);
                        stop_session(&state.args.session_id, &why, Ended::NotRenewed(Some(&e))).await
                    }
                    Err(_elapsed) => {
                        let why = lost(&*state.args.lease.lock().await);
                        stop_session(&state.args.session_id, &why, Ended::NotRenewed(None)).await
                    }
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

async fn stop_session(session_id: &str, why: &ClusterError, ended: Ended<'_>) {
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
