//! The registry of the cluster's live hosts: a KV bucket with one key per host, holding its API
//! address, its doors (one per running capsule), its load (running sessions) and its last
//! heartbeat. Entries expire after the bucket's `max_age` (the lease TTL), so a host that stops
//! heartbeating leaves it; each host's claimer writes its own entry every sixth of the TTL.

use async_nats::jetstream::{self, kv};
use serde::{Deserialize, Serialize};

use super::ClusterError;

/// The bucket of live hosts.
pub const HOSTS_BUCKET: &str = "CAPSULE_HOSTS";

/// One live host.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostEntry {
    /// Its name in the cluster.
    pub name: String,
    /// Its host API's URL, once it serves one.
    pub api: Option<String>,
    /// Its running capsule sessions.
    pub load: u32,
    /// The door of each capsule it runs (a session that moves takes its door to its new host).
    #[serde(default)]
    pub doors: Vec<HostDoor>,
    /// When it wrote this entry (ms since the Unix epoch).
    pub heartbeat_ms: u64,
}

/// A door a host serves.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostDoor {
    /// The capsule's name on that host.
    pub capsule: String,
    /// The session behind the door.
    pub session_id: Option<String>,
    /// The door's URL.
    pub url: String,
}

/// The host registry.
#[derive(Debug, Clone)]
pub struct Hosts {
    kv: kv::Store,
}

impl Hosts {
    /// Create the bucket (entries live `ttl`, `replicas` copies), or take the one that exists.
    pub async fn open(
        js: &jetstream::Context,
        replicas: usize,
        ttl: std::time::Duration,
    ) -> Result<Hosts, ClusterError> {
        Ok(Hosts { kv: super::kv_read::bucket(js, HOSTS_BUCKET, replicas, Some(ttl)).await? })
    }

    /// Write this host's entry (its heartbeat).
    pub async fn beat(&self, entry: &HostEntry) -> Result<(), ClusterError> {
        super::subject(&entry.name, super::Record::Trace)?;
        let value = serde_json::to_vec(entry).unwrap_or_default();
        self.kv
            .put(&entry.name, value.into())
            .await
            .map(|_| ())
            .map_err(|e| ClusterError::js(format!("write the heartbeat of {}", entry.name), e))
    }

    /// Every live host, least loaded first (then by name). An entry in another format is
    /// left out with a coded warning (`E-CLU-004`): one bad entry does not hide the others.
    pub async fn live(&self) -> Result<Vec<HostEntry>, ClusterError> {
        let keys = super::kv_read::keys(&self.kv, "list the hosts").await?;
        let mut out = Vec::new();
        for key in keys {
            let value = self.kv.get(&key).await.map_err(|e| ClusterError::js(format!("read host {key}"), e))?;
            let Some(value) = value else { continue };
            match serde_json::from_slice::<HostEntry>(&value) {
                Ok(entry) => out.push(entry),
                Err(e) => tracing::warn!(
                    key = %key,
                    error = %e,
                    "{}: the host registry's entry {key} is not in this runtime's format; it is left out",
                    capsule_protocol::Code::ClusterBadEntry
                ),
            }
        }
        out.sort_by(|a, b| a.load.cmp(&b.load).then_with(|| a.name.cmp(&b.name)));
        Ok(out)
    }
}
