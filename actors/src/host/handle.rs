//! [`HostHandle`]: the typed front of a [`HostSupervisor`], for the host API, the CLI, tests and
//! benches. Each method is one message; a host that does not answer in time is
//! [`HostError::Unavailable`].

use capsule_protocol::host_file::PlannedCapsule;
use ractor::{Actor, ActorRef};
use std::sync::Arc;
use std::time::Duration;

use super::supervisor::{HostArgs, HostMsg, HostSupervisor};
use super::{Action, CapsuleEntry, HostError, RestartPolicy, Shared};
use crate::session::Session;

/// How long a question to the host may take.
const ASK: Duration = Duration::from_secs(10);
/// How long an action may take: a graceful stop (bounded at ~45 s) plus a launch.
const ACT: Duration = Duration::from_secs(120);

/// A running host.
#[derive(Clone)]
pub struct HostHandle {
    actor: ActorRef<HostMsg>,
    /// The cluster the host joined, if any (the API follows any session of it).
    cluster: Option<crate::cluster::ClusterHost>,
}

async fn ask<T: Send + 'static>(
    actor: &ActorRef<HostMsg>,
    msg: impl FnOnce(ractor::RpcReplyPort<T>) -> HostMsg,
    timeout: Option<Duration>,
) -> Result<T, HostError> {
    match actor.call(msg, timeout).await {
        Ok(ractor::rpc::CallResult::Success(v)) => Ok(v),
        _ => Err(HostError::Unavailable),
    }
}

impl HostHandle {
    /// Spawn the host supervisor; every capsule starts launching at once.
    pub async fn start(
        capsules: Vec<PlannedCapsule>,
        shared: Shared,
        policy: RestartPolicy,
    ) -> Result<HostHandle, ractor::SpawnErr> {
        let cluster = shared.cluster.clone();
        let (actor, _) = Actor::spawn(None, HostSupervisor, HostArgs { capsules, shared, policy }).await?;
        Ok(HostHandle { actor, cluster })
    }

    /// The cluster the host joined, if any.
    pub fn cluster(&self) -> Option<&crate::cluster::ClusterHost> {
        self.cluster.as_ref()
    }

    /// The supervisor.
    pub fn actor(&self) -> &ActorRef<HostMsg> {
        &self.actor
    }

    /// Every capsule's entry, in start order.
    pub async fn list(&self) -> Result<Vec<CapsuleEntry>, HostError> {
        ask(&self.actor, HostMsg::List, Some(ASK)).await
    }

    /// The entries once no capsule is starting (no deadline: launches are bounded by their own).
    pub async fn settled(&self) -> Result<Vec<CapsuleEntry>, HostError> {
        ask(&self.actor, HostMsg::Settled, None).await
    }

    /// One capsule's entry.
    pub async fn get(&self, name: &str) -> Result<CapsuleEntry, HostError> {
        self.list()
            .await?
            .into_iter()
            .find(|e| e.name == name)
            .ok_or_else(|| HostError::UnknownCapsule(name.to_string()))
    }

    /// Start, stop or restart a capsule; the entry after the action.
    pub async fn act(&self, name: &str, action: Action) -> Result<CapsuleEntry, HostError> {
        let name = name.to_string();
        ask(&self.actor, |reply| HostMsg::Act { name, action, reply }, Some(ACT)).await?
    }

    /// The running session of a capsule (`None` unless running).
    pub async fn session(&self, name: &str) -> Result<Option<Arc<Session>>, HostError> {
        let name = name.to_string();
        ask(&self.actor, |reply| HostMsg::Session { name, reply }, Some(ASK)).await?
    }

    /// Stop every capsule gracefully (running tasks end `canceled`, each session writes
    /// `session_end`), then the host itself; the final entries.
    pub async fn shutdown(&self) -> Result<Vec<CapsuleEntry>, HostError> {
        let entries = ask(&self.actor, HostMsg::Shutdown, Some(ACT)).await?;
        let _ = self.actor.stop_and_wait(None, Some(ASK)).await;
        Ok(entries)
    }
}
