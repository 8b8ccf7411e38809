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
    async_nats::ConnectOptions::new()
        .connection_timeout(CONNECT_TIMEOUT)
        .max_reconnects(None)
        .connect(urls)
        .await
        .map_err(|e| ClusterError::Unreachable { urls: urls.join(","), source: Box::new(e) })
}
