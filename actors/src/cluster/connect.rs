//! Connecting to the cluster's NATS servers.

use std::time::Duration;

use super::ClusterError;

/// How long each server may take to answer at start.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);

/// `nats://a:4222,nats://b:4222` as a list (empty entries dropped).
pub fn split_urls(list: &str) -> Vec<String> {
    list.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

/// Connect to any of `urls`; a coded error naming them when none answers. Once connected the
/// client reconnects on its own for as long as the process runs.
pub async fn connect(urls: &[String]) -> Result<async_nats::Client, ClusterError> {
    options().connect(urls).await.map_err(|e| ClusterError::Unreachable { urls: urls.join(","), source: Box::new(e) })
}

/// How a host's connection behaves: [`CONNECT_TIMEOUT`] per server at start, reconnects for as
/// long as the process runs.
fn options() -> async_nats::ConnectOptions {
    async_nats::ConnectOptions::new().connection_timeout(CONNECT_TIMEOUT).max_reconnects(None)
}

/// How long a server may take to answer when asked whether it leads the journal stream.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// `client`, or a new connection to the server that leads the journal stream when another of
/// `urls` is that server. Every journal append goes through the stream's leader, so a client on
/// a follower pays a route hop each way on every step the loop waits for (about a quarter of an
/// acknowledged append on loopback, BENCHMARKS.md). Best effort: when the leader is not found
/// among `urls` (the list names one server, the leader is behind another address, a server does
/// not answer within [`PROBE_TIMEOUT`]) `client` is kept. The new connection keeps the order of
/// `urls`, the leader's first, for its reconnects too: a lost leader's address is tried first,
/// then the others. A leader elected later is not followed (a hop slower, never wrong).
pub async fn near_journal_leader(client: async_nats::Client, urls: &[String]) -> async_nats::Client {
    if urls.len() < 2 {
        return client;
    }
    let js = async_nats::jetstream::new(client.clone());
    let leader = match js.get_stream(super::JOURNAL_STREAM).await {
        Ok(mut stream) => stream.info().await.ok().and_then(|info| info.cluster.clone()).and_then(|c| c.leader),
        Err(_) => None,
    };
    let Some(leader) = leader else { return client };
    if client.server_info().server_name == leader {
        return client;
    }
    for (i, url) in urls.iter().enumerate() {
        let probe = async_nats::ConnectOptions::new().connection_timeout(PROBE_TIMEOUT).connect(url.as_str()).await;
        let Ok(probe) = probe else { continue };
        let name = probe.server_info().server_name;
        drop(probe);
        if name != leader {
            continue;
        }
        let ordered: Vec<&str> = std::iter::once(url.as_str())
            .chain(urls.iter().enumerate().filter(|(j, _)| *j != i).map(|(_, u)| u.as_str()))
            .collect();
        let near = options().retain_servers_order().connect(ordered).await;
        return match near {
            Ok(near) => {
                tracing::info!(server = %leader, url = %url, "connected to the journal stream's leader");
                near
            }
            Err(_) => client,
        };
    }
    client
}
