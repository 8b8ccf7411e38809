//! Where a session's journal records go: the interface with its two backends.
//!
//! - [`SealedFile`]: a local file (`trace.jsonl`, `conversation.jsonl`), each line numbered and
//!   checksummed; an append returns once the line is with the OS.
//! - [`StreamLog`]: a JetStream subject of the cluster; an append returns once JetStream
//!   acknowledged it, and is refused when another owner appended since (fencing).
//!
//! Either way the journal answers a step's append only after it returned, so the loop acts on
//! a step only once it is journaled.

use futures::future::BoxFuture;

use crate::cluster::{ClusterError, StreamLog};
use crate::journal_check::SealedFile;

/// Why an append or a sync failed.
#[derive(Debug, thiserror::Error)]
pub enum LogError {
    /// The file could not be written.
    #[error(transparent)]
    Io(#[from] std::io::Error),
    /// JetStream refused or did not acknowledge the entry.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
}

/// One append-only journal record.
pub trait JournalLog: Send {
    /// Append one serialized JSON object.
    fn append(&mut self, object: Vec<u8>) -> BoxFuture<'_, Result<(), LogError>>;
    /// Append several objects of one step: the first failure, and how many objects were not
    /// written. A file writes them with one `write` call; a JetStream subject stores them in
    /// one entry, in one round trip (all of them or none, either way).
    fn append_all(&mut self, objects: Vec<Vec<u8>>) -> BoxFuture<'_, (Result<(), LogError>, u64)>;
    /// Make what was appended durable (a JetStream entry already is once acknowledged).
    fn sync(&mut self) -> BoxFuture<'_, Result<(), LogError>>;
    /// The backend's position after the last append (a JetStream sequence; 0 for a file).
    fn position(&self) -> u64 {
        0
    }
}

impl JournalLog for SealedFile {
    fn append(&mut self, object: Vec<u8>) -> BoxFuture<'_, Result<(), LogError>> {
        let r = SealedFile::append(self, object).map_err(LogError::from);
        Box::pin(std::future::ready(r))
    }

    fn append_all(&mut self, objects: Vec<Vec<u8>>) -> BoxFuture<'_, (Result<(), LogError>, u64)> {
        let n = objects.len() as u64;
        let r = match self.append_many(objects) {
            Ok(()) => (Ok(()), 0),
            Err(e) => (Err(LogError::from(e)), n),
        };
        Box::pin(std::future::ready(r))
    }

    fn sync(&mut self) -> BoxFuture<'_, Result<(), LogError>> {
        let r = self.sync_data().map_err(LogError::from);
        Box::pin(std::future::ready(r))
    }
}

impl JournalLog for StreamLog {
    fn append(&mut self, object: Vec<u8>) -> BoxFuture<'_, Result<(), LogError>> {
        Box::pin(async move { StreamLog::append(self, object).await.map(|_| ()).map_err(LogError::from) })
    }

    fn append_all(&mut self, objects: Vec<Vec<u8>>) -> BoxFuture<'_, (Result<(), LogError>, u64)> {
        Box::pin(async move {
            let n = objects.len() as u64;
            match StreamLog::append_all(self, objects).await {
                Ok(_) => (Ok(()), 0),
                Err(e) => (Err(LogError::from(e)), n),
            }
        })
    }

    fn sync(&mut self) -> BoxFuture<'_, Result<(), LogError>> {
        Box::pin(std::future::ready(Ok(())))
    }

    fn position(&self) -> u64 {
        self.last()
    }
}
