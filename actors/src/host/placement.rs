//! Placing a capsule in the cluster: `POST /capsules` on any clustered host puts the capsule's
//! folder in the cluster's store, picks the least-loaded live host of the registry (fewest
//! running sessions, then name), and has that host run it, by NATS request/reply on
//! `capsule.place.<host>` (or directly, when it is this host). The chosen host fetches the
//! capsule by its spec hash and runs it in a new slot; the answer is that slot's entry once its
//! session runs, with `host`.
//!
//! Deliberately simple: the load is the last heartbeat's (up to a sixth of the TTL old), so two
//! placements at the same moment may pick the same host.

use capsule_protocol::host_file::PlannedCapsule;
use ractor::ActorRef;
use serde::{Deserialize, Serialize};
use std::time::Duration;

use super::supervisor::HostMsg;
use super::{CapsuleEntry, HostError};
use crate::cluster::{ClusterError, ClusterHost};

/// How long a placement may take: fetching the capsule, loading it, opening its door.
const PLACE_TIMEOUT: Duration = Duration::from_secs(120);

/// What one host asks another to run.
#[derive(Debug, Serialize, Deserialize)]
struct PlaceRequest {
    name: String,
    spec: String,
}

/// The answer: the slot's entry, or why not.
#[derive(Debug, Serialize, Deserialize)]
struct PlaceAnswer {
    entry: Option<CapsuleEntry>,
    error: Option<String>,
}

/// Why a placement failed.
#[derive(Debug, thiserror::Error)]
pub enum PlaceError {
    /// The capsule could not be stored or fetched, or the registry not read.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The host refused or did not answer.
    #[error(transparent)]
    Host(#[from] HostError),
    /// The chosen host refused it.
    #[error("host {host} could not run the capsule: {error}")]
    Remote {
        /// The chosen host.
        host: String,
        /// Its answer.
        error: String,
    },
    /// The request to the chosen host failed.
    #[error("host {host} did not answer the placement; try again")]
    Unanswered {
        /// The chosen host.
        host: String,
        /// The client's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

fn subject(host: &str) -> String {
    format!("capsule.place.{host}")
}

/// Run the stored capsule `spec` on this host as `name`; the entry once its session runs.
async fn place_here(
    c: &ClusterHost,
    host: &ActorRef<HostMsg>,
    name: String,
    spec: &str,
) -> Result<CapsuleEntry, PlaceError> {
    let manifest = c.files.materialize(spec, &c.root.join("capsules")).await?;
    let workdir = c.root.join("placed").join(&name);
    let planned = PlannedCapsule { name, manifest, workdir, port: 0 };
    match host.call(|reply| HostMsg::Place { spec: planned, reply }, Some(PLACE_TIMEOUT)).await {
        Ok(ractor::rpc::CallResult::Success(r)) => Ok(r?),
        _ => Err(HostError::Unavailable.into()),
    }
}

/// Answer placements sent to this host, until its connection closes.
pub async fn listen(c: ClusterHost, host: ActorRef<HostMsg>) -> Result<(), ClusterError> {
    use futures::StreamExt;
    let client = c.js.client();
    let mut requests =
        client.subscribe(subject(&c.name)).await.map_err(|e| ClusterError::js("listen for placements", e))?;
    tokio::spawn(async move {
        while let Some(m) = requests.next().await {
            let Some(reply) = m.reply.clone() else { continue };
            let answer = match serde_json::from_slice::<PlaceRequest>(&m.payload) {
                Ok(r) => match place_here(&c, &host, r.name, &r.spec).await {
                    Ok(entry) => PlaceAnswer { entry: Some(entry), error: None },
                    Err(e) => PlaceAnswer { entry: None, error: Some(super::chain(&e)) },
                },
                Err(e) => PlaceAnswer { entry: None, error: Some(format!("not a placement request: {e}")) },
            };
            let _ = client.publish(reply, serde_json::to_vec(&answer).unwrap_or_default().into()).await;
        }
    });
    Ok(())
}

/// Place the capsule at `path` (a capsule folder or its `murmur.yaml`, readable by this host)
/// on the least-loaded live host, as `name`; that host's entry for it, and the host's name.
pub async fn place(
    c: &ClusterHost,
    host: &ActorRef<HostMsg>,
    path: &std::path::Path,
    name: String,
) -> Result<(CapsuleEntry, String), PlaceError> {
    let spec = c.files.submit(path, &[]).await?.hash();
    let target = c.hosts.live().await?.into_iter().next().map_or_else(|| c.name.clone(), |h| h.name);
    if target == c.name {
        return Ok((place_here(c, host, name, &spec).await?, target));
    }
    let request = serde_json::to_vec(&PlaceRequest { name, spec }).unwrap_or_default();
    let client = c.js.client();
    let asked = tokio::time::timeout(PLACE_TIMEOUT, client.request(subject(&target), request.into())).await;
    let message = match asked {
        Ok(Ok(m)) => m,
        Ok(Err(e)) => return Err(PlaceError::Unanswered { host: target, source: Box::new(e) }),
        Err(e) => return Err(PlaceError::Unanswered { host: target, source: Box::new(e) }),
    };
    match serde_json::from_slice::<PlaceAnswer>(&message.payload) {
        Ok(PlaceAnswer { entry: Some(entry), .. }) => Ok((entry, target)),
        Ok(PlaceAnswer { error, .. }) => {
            Err(PlaceError::Remote { host: target, error: error.unwrap_or_else(|| "no answer".into()) })
        }
        Err(e) => {
            Err(PlaceError::Remote { host: target, error: format!("an answer not in this runtime's format: {e}") })
        }
    }
}
