//! A session's journal records as JetStream subjects: one stream for the cluster's sessions,
//! a subject per session and record (`capsule.journal.<session>.<record>`), replicated as the
//! cluster config says (R3 in the tests).
//!
//! Every append names the subject's last sequence as its writer knows it
//! (`Nats-Expected-Last-Subject-Sequence`): JetStream stores it only if nobody appended since,
//! so a host that lost the session cannot add a line after the new owner's (the fencing). An
//! append returns once JetStream acknowledged it (stored on a quorum of replicas): the same
//! write-before-act rule the file journal keeps.

use async_nats::jetstream::context::PublishErrorKind;
use async_nats::jetstream::message::PublishMessage;
use async_nats::jetstream::{self, stream};

use super::ClusterError;

/// The stream holding every session's journal records.
pub const JOURNAL_STREAM: &str = "CAPSULE_JOURNAL";

const PREFIX: &str = "capsule.journal";

/// Which record of a session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Record {
    /// `conversation.jsonl`.
    Conversation,
    /// `trace.jsonl`.
    Trace,
    /// `frames.jsonl`.
    Frames,
}

impl Record {
    fn token(self) -> &'static str {
        match self {
            Record::Conversation => "conversation",
            Record::Trace => "trace",
            Record::Frames => "frames",
        }
    }
}

/// The subject of a session's record.
pub fn subject(session: &str, record: Record) -> Result<String, ClusterError> {
    if !valid_session_id(session) {
        return Err(ClusterError::BadSession { session: session.to_string() });
    }
    Ok(format!("{PREFIX}.{session}.{}", record.token()))
}

/// Whether `session` can name a session's subjects (and a URL path segment): letters, digits,
/// `_` and `-`, at least one.
pub fn valid_session_id(session: &str) -> bool {
    !session.is_empty() && session.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// How long an operation keeps trying while JetStream does not answer (a cluster still
/// forming, a leader election after a server was lost).
pub const PATIENCE: std::time::Duration = std::time::Duration::from_secs(15);

/// How long an append waits for JetStream's acknowledgement before it is sent again (the same
/// append, deduplicated by its id). An acknowledgement lost with a connection would otherwise
/// hold the record's writer (for the conversation, the step) for the client's own wait (5 s),
/// although the client reconnects at once.
pub const ACK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Run `op` until it succeeds, fails for a reason other than JetStream not answering, or
/// [`PATIENCE`] runs out.
pub(crate) async fn patiently<T, F, Fut>(mut op: F) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        match op().await {
            Err(ClusterError::JetStream { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// Create the journal stream with `replicas`, or take the one that exists.
pub async fn ensure_journal(js: &jetstream::Context, replicas: usize) -> Result<stream::Stream, ClusterError> {
    let config = stream::Config {
        name: JOURNAL_STREAM.to_string(),
        subjects: vec![format!("{PREFIX}.>")],
        num_replicas: replicas,
        storage: stream::StorageType::File,
        ..Default::default()
    };
    patiently(|| async {
        js.get_or_create_stream(config.clone()).await.map_err(|e| ClusterError::js("create the journal stream", e))
    })
    .await
}

/// One session record, open for appending.
#[derive(Debug)]
pub struct StreamLog {
    js: jetstream::Context,
    subject: String,
    last: u64,
    /// This writer's id, unique per open: the deduplication id of its appends.
    writer: String,
}

impl StreamLog {
    /// Read the record (its entries in order, each a JSON object) and open it for appending
    /// after its last entry.
    pub async fn open(
        js: &jetstream::Context,
        session: &str,
        record: Record,
    ) -> Result<(StreamLog, Vec<Vec<u8>>), ClusterError> {
        let subject = subject(session, record)?;
        let (entries, last) = read_patiently(js, &subject).await?;
        let writer = uuid::Uuid::now_v7().simple().to_string();
        Ok((StreamLog { js: js.clone(), subject, last, writer }, entries))
    }

    /// Reopen a record this writer was appending to (a restarted journal): refused as fenced
    /// when its last entry is no longer `expected`, the last one this writer wrote.
    pub async fn reopen(
        js: &jetstream::Context,
        session: &str,
        record: Record,
        expected: u64,
    ) -> Result<StreamLog, ClusterError> {
        let (log, _) = StreamLog::open(js, session, record).await?;
        if log.last != expected {
            return Err(ClusterError::Fenced { subject: log.subject, expected });
        }
        Ok(log)
    }

    /// The stream sequence of the last entry this writer knows (0: none).
    pub fn last(&self) -> u64 {
        self.last
    }

    /// The subject.
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// Append several JSON objects as one step: one entry, which is the object itself when
    /// there is one, else a batch `{"batch": [object, …]}` (stored or refused whole; readers
    /// get the objects back in order, see [`records_of`]). Objects of more than [`BATCH_BYTES`]
    /// together take several entries, in order, so that no entry nears JetStream's limit on
    /// one message (1 MiB by default); an object larger than that is stored alone. Returns the
    /// last entry's sequence (the last one known when there is nothing to append).
    pub async fn append_all(&mut self, objects: Vec<Vec<u8>>) -> Result<u64, ClusterError> {
        for entry in batches(objects) {
            self.append(entry).await?;
        }
        Ok(self.last)
    }

    /// Append one JSON object once nobody else appended since this writer's last entry;
    /// returns its stream sequence after JetStream acknowledged it. While JetStream does not
    /// answer it keeps trying (the same append, deduplicated) until it does: the step waits, it
    /// is never taken unacknowledged. A session whose lease is lost meanwhile is stopped by its
    /// lease keeper, which ends the wait; a refusal (fenced) ends it at once.
    pub async fn append(&mut self, object: Vec<u8>) -> Result<u64, ClusterError> {
        let payload = bytes::Bytes::from(object);
        let mut next_warning = tokio::time::Instant::now() + PATIENCE;
        let mut resent = false;
        loop {
            match self.append_once(payload.clone()).await {
                Err(e @ ClusterError::JetStream { .. }) => {
                    if !resent && std::error::Error::source(&e).is_some_and(|s| s.is::<tokio::time::error::Elapsed>()) {
                        resent = true;
                        tracing::warn!(
                            subject = self.subject,
                            "an append was not acknowledged within {ACK_WAIT:?}; sending it again (deduplicated)"
                        );
                    }
                    if tokio::time::Instant::now() >= next_warning {
                        tracing::warn!(subject = self.subject, error = %e, "JetStream has not acknowledged an append for a while; still waiting");
                        next_warning += PATIENCE;
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
                }
                other => return other,
            }
        }
    }

    async fn append_once(&mut self, payload: bytes::Bytes) -> Result<u64, ClusterError> {
        // The id (this writer, this position) makes a retried append idempotent: if an earlier
        // attempt was stored but its acknowledgement lost (a leader change), JetStream answers
        // the retry with the stored entry instead of refusing it as a conflict. Another
        // writer's id differs, so its append at the same position is still refused.
        let id = format!("{}:{}", self.writer, self.last);
        let publish = PublishMessage::build().payload(payload).expected_last_subject_sequence(self.last).message_id(id);
        let pending = self
            .js
            .send_publish(self.subject.clone(), publish)
            .await
            .map_err(|e| ClusterError::js(format!("publish to {}", self.subject), e))?;
        let acked = tokio::time::timeout(ACK_WAIT, pending).await.map_err(|elapsed| {
            ClusterError::js(format!("wait for the acknowledgement of an entry of {}", self.subject), elapsed)
        })?;
        match acked {
            Ok(ack) => {
                self.last = ack.sequence;
                Ok(ack.sequence)
            }
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence || super::wrong_last_sequence(&e) => {
                Err(ClusterError::Fenced { subject: self.subject.clone(), expected: self.last })
            }
            Err(e) => Err(ClusterError::js(format!("store an entry of {}", self.subject), e)),
        }
    }
}

/// [`read`], tried again while JetStream does not answer; an entry in the wrong format is
/// refused at once.
async fn read_patiently(js: &jetstream::Context, subject: &str) -> Result<(Vec<Vec<u8>>, u64), ClusterError> {
    patiently(|| async {
        match js.get_stream(JOURNAL_STREAM).await {
            Ok(stream) => read(&stream, subject).await,
            Err(e) => Err(ClusterError::js("find the journal stream", e)),
        }
    })
    .await
}

/// Every entry of `subject` in order, checked to be JSON objects, and the last one's sequence.
/// Each is read from the stream leader ("the first entry of the subject at or after N"), so
/// the read is consistent with the appends that were acknowledged, and no consumer is left
/// behind on a server that may be lost.
async fn read(stream: &stream::Stream, subject: &str) -> Result<(Vec<Vec<u8>>, u64), ClusterError> {
    use async_nats::jetstream::stream::LastRawMessageErrorKind as Kind;
    let (mut entries, mut last) = (Vec::new(), 0);
    loop {
        let m = match stream.get_first_raw_message_by_subject(subject, last + 1).await {
            Ok(m) => m,
            Err(e) if e.kind() == Kind::NoMessageFound => return Ok((entries, last)),
            Err(e) => return Err(ClusterError::js(format!("read {subject}"), e)),
        };
        let sequence = m.sequence;
        match records_of(&m.payload) {
            Ok(records) => entries.extend(records.into_iter().map(<[u8]>::to_vec)),
            Err(why) => return Err(ClusterError::BadEntry { subject: subject.to_string(), sequence, why }),
        }
        last = sequence;
    }
}

/// The most bytes of objects one batch entry holds.
pub const BATCH_BYTES: usize = 256 * 1024;

/// `objects` as entries, in order: each run of objects of at most [`BATCH_BYTES`] together is
/// one entry (the object itself when alone, else a batch); a larger object is one entry alone.
fn batches(objects: Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    let mut runs: Vec<Vec<Vec<u8>>> = Vec::new();
    let mut bytes = 0;
    for o in objects {
        match runs.last_mut() {
            Some(run) if bytes + o.len() <= BATCH_BYTES => {
                bytes += o.len();
                run.push(o);
            }
            _ => {
                bytes = o.len();
                runs.push(vec![o]);
            }
        }
    }
    runs.into_iter()
        .map(|mut run| {
            if run.len() == 1 {
                return run.pop().unwrap_or_default();
            }
            let mut batch = Vec::with_capacity(run.iter().map(|o| o.len() + 1).sum::<usize>() + 12);
            batch.extend_from_slice(b"{\"batch\":[");
            for (i, o) in run.iter().enumerate() {
                if i > 0 {
                    batch.push(b',');
                }
                batch.extend_from_slice(o);
            }
            batch.extend_from_slice(b"]}");
            batch
        })
        .collect()
}

/// The records of one stored entry, in order: the entry itself when it is a JSON object, or
/// the objects of a batch (`{"batch": [object, …]}`, an object with that one key, written by
/// [`StreamLog::append_all`]). An entry that is neither is refused, saying why.
pub fn records_of(entry: &[u8]) -> Result<Vec<&[u8]>, String> {
    use serde_json::value::RawValue;
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Batch<'a> {
        #[serde(borrow)]
        batch: Vec<&'a RawValue>,
    }
    let object = |raw: &[u8]| match serde_json::from_slice::<serde_json::Value>(raw) {
        Ok(v) if v.is_object() => Ok(()),
        Ok(_) => Err("JSON, but not an object".to_string()),
        Err(e) => Err(e.to_string()),
    };
    object(entry)?;
    match serde_json::from_slice::<Batch>(entry) {
        Ok(b) => b
            .batch
            .into_iter()
            .map(|r| {
                object(r.get().as_bytes()).map(|()| r.get().as_bytes()).map_err(|why| format!("in a batch: {why}"))
            })
            .collect(),
        Err(_) => Ok(vec![entry]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(n: usize, size: usize) -> Vec<u8> {
        let pad = "x".repeat(size.saturating_sub(20));
        format!(r#"{{"n":{n},"p":"{pad}"}}"#).into_bytes()
    }

    #[test]
    fn objects_are_batched_in_order_up_to_the_entry_size_and_read_back_one_by_one() {
        assert!(batches(Vec::new()).is_empty());
        let one = batches(vec![object(1, 30)]);
        assert_eq!(one, vec![object(1, 30)], "a lone object is its own entry");
        let small: Vec<Vec<u8>> = (0..5).map(|n| object(n, 100)).collect();
        let entries = batches(small.clone());
        assert_eq!(entries.len(), 1);
        assert_eq!(records_of(&entries[0]).expect("a batch"), small.iter().map(Vec::as_slice).collect::<Vec<_>>());
        // 100 KiB objects: two fit an entry; a 300 KiB one stands alone.
        let big =
            vec![object(0, 100 << 10), object(1, 100 << 10), object(2, 100 << 10), object(3, 300 << 10), object(4, 10)];
        let entries = batches(big.clone());
        assert_eq!(entries.len(), 4, "[0 1] [2] [3] [4]");
        assert!(entries.iter().all(|e| e.len() <= BATCH_BYTES + 16 || records_of(e).expect("entry").len() == 1));
        let back: Vec<&[u8]> = entries.iter().flat_map(|e| records_of(e).expect("entry")).collect();
        assert_eq!(back, big.iter().map(Vec::as_slice).collect::<Vec<_>>(), "in order, none lost");
    }
}
