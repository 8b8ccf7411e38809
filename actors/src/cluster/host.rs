//! What a host brings to a clustered session: its connection, its name and the lease bucket.

use async_nats::jetstream;

use super::{ClusterError, Leases};

/// This host in the cluster.
#[derive(Debug, Clone)]
pub struct ClusterHost {
    /// JetStream of the cluster.
    pub js: jetstream::Context,
    /// This host's name (unique in the cluster).
    pub name: String,
    /// The lease bucket.
    pub leases: Leases,
    /// The cluster's daily spend.
    pub spend: super::ClusterSpend,
    /// Replicas of the journal stream and the lease bucket.
    pub replicas: usize,
    /// The capsule store.
    pub files: super::CapsuleFiles,
    /// The book of live sessions.
    pub sessions: super::Sessions,
    /// Where this host writes the capsules it fetched and the sessions it claimed.
    pub root: std::path::PathBuf,
    /// The registry of live hosts.
    pub hosts: super::Hosts,
    /// This host's API URL, set once it serves it (written in its heartbeat).
    pub api: std::sync::Arc<std::sync::OnceLock<String>>,
}

impl ClusterHost {
    /// Connect to any of `urls` and join as `name` (E-CLU-001 when none answers). The host's
    /// connection is to the journal stream's leader when `urls` names it
    /// ([`near_journal_leader`](super::near_journal_leader)).
    pub async fn start(
        urls: &[String],
        name: &str,
        replicas: usize,
        ttl: std::time::Duration,
    ) -> Result<ClusterHost, ClusterError> {
        let client = super::connect(urls).await?;
        super::ensure_journal(&jetstream::new(client.clone()), replicas).await?;
        let client = super::near_journal_leader(client, urls).await;
        ClusterHost::join(jetstream::new(client), name, replicas, ttl).await
    }

    /// The default name of this host: the machine's name and the process id.
    pub fn default_name() -> String {
        let machine = std::fs::read_to_string("/proc/sys/kernel/hostname").unwrap_or_default();
        let machine = machine.trim();
        format!("{}-{}", if machine.is_empty() { "host" } else { machine }, std::process::id())
    }

    /// Join: make sure the journal stream, the buckets and the capsule store exist. Fetched
    /// capsules and claimed sessions go under `capsule-work/cluster` (see [`ClusterHost::root`]).
    pub async fn join(
        js: jetstream::Context,
        name: &str,
        replicas: usize,
        ttl: std::time::Duration,
    ) -> Result<ClusterHost, ClusterError> {
        super::ensure_journal(&js, replicas).await?;
        let leases = Leases::open(&js, replicas, ttl).await?;
        let spend = super::ClusterSpend::open(&js, replicas).await?;
        let files = super::CapsuleFiles::open(&js, replicas).await?;
        let sessions = super::Sessions::open(&js, replicas).await?;
        let root = std::path::PathBuf::from("capsule-work").join("cluster");
        let hosts = super::Hosts::open(&js, replicas, ttl).await?;
        let api = Default::default();
        Ok(ClusterHost { js, name: name.to_string(), leases, spend, replicas, files, sessions, root, hosts, api })
    }
}
