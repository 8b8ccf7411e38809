//! The lease keeper: one per clustered session, under the capsule supervisor. It renews the
//! session's lease every third of its TTL. When a renewal is refused (the lease expired or
//! another host took it) it stops the whole session at once: nothing more is written, and the
//! fenced journal would refuse it anyway.

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
}

impl KeeperArgs {
    /// The keeper of `lease` (taken by `c` for `session_id`): it renews every third of the
    /// TTL. Also returns what `session_start` records of the ownership: host, epoch, TTL.
    pub fn new(c: &crate::cluster::ClusterHost, session_id: &str, lease: Lease) -> (KeeperArgs, serde_json::Value) {
        let ttl = c.leases.ttl();
        let fields =
            serde_json::json!({"host": c.name, "epoch": lease.record().epoch, "lease_ttl_ms": ttl.as_millis() as u64});
        let every = (ttl / 3).max(Duration::from_millis(50));
        let args = KeeperArgs { session_id: session_id.to_string(), lease: Arc::new(Mutex::new(lease)), every };
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
        myself: ActorRef<KeeperMsg>,
        msg: KeeperMsg,
        state: &mut KeeperArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            KeeperMsg::Renew => {
                let renewed = state.lease.lock().await.renew().await;
                match renewed {
                    Ok(()) => {}
                    Err(e @ ClusterError::Lost { .. }) => stop_session(&myself, &state.session_id, &e).await,
                    // NATS unreachable for a moment: try again at the next tick; if the TTL
                    // passes meanwhile, the next renewal is refused and the session stops.
                    Err(e) => {
                        tracing::warn!(session = state.session_id, error = %e, "the lease was not renewed this time")
                    }
                }
            }
        }
        Ok(())
    }
}

async fn stop_session(myself: &ActorRef<KeeperMsg>, session_id: &str, why: &ClusterError) {
    // Nothing more is written once the lease is lost, not even a trace line: the session's
    // records belong to the new owner now. The host's log says what happened.
    tracing::error!(session = session_id, code = why.code().as_str(), error = %why, "the session's lease is lost; stopping it");
    let _ = myself;
    let supervisor = crate::names::name(session_id, crate::names::role::SUPERVISOR);
    if let Some(sup) = ractor::registry::where_is(supervisor) {
        sup.stop(Some(format!("lease lost: {why}")));
    }
}
