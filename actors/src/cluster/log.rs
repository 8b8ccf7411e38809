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
use async_nats::jetstream::{self, consumer, stream};
use futures::StreamExt;

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
    let ok = !session.is_empty() && session.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if !ok {
        return Err(ClusterError::BadSession { session: session.to_string() });
    }
    Ok(format!("{PREFIX}.{session}.{}", record.token()))
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
    js.get_or_create_stream(config).await.map_err(|e| ClusterError::js("create the journal stream", e))
}

/// One session record, open for appending.
#[derive(Debug)]
pub struct StreamLog {
    js: jetstream::Context,
    subject: String,
    last: u64,
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
        let stream = js.get_stream(JOURNAL_STREAM).await.map_err(|e| ClusterError::js("find the journal stream", e))?;
        let (entries, last) = read(&stream, &subject).await?;
        Ok((StreamLog { js: js.clone(), subject, last }, entries))
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

    /// Append one JSON object once nobody else appended since this writer's last entry;
    /// returns its stream sequence after JetStream acknowledged it.
    pub async fn append(&mut self, object: Vec<u8>) -> Result<u64, ClusterError> {
        let publish = PublishMessage::build().payload(object.into()).expected_last_subject_sequence(self.last);
        let pending = self
            .js
            .send_publish(self.subject.clone(), publish)
            .await
            .map_err(|e| ClusterError::js(format!("publish to {}", self.subject), e))?;
        match pending.await {
            Ok(ack) => {
                self.last = ack.sequence;
                Ok(ack.sequence)
            }
            Err(e) if e.kind() == PublishErrorKind::WrongLastSequence => {
                Err(ClusterError::Fenced { subject: self.subject.clone(), expected: self.last })
            }
            Err(e) => Err(ClusterError::js(format!("store an entry of {}", self.subject), e)),
        }
    }
}

/// Every entry of `subject` in order, checked to be JSON objects, and the last one's sequence.
async fn read(stream: &stream::Stream, subject: &str) -> Result<(Vec<Vec<u8>>, u64), ClusterError> {
    let config = consumer::pull::OrderedConfig {
        filter_subject: subject.to_string(),
        deliver_policy: consumer::DeliverPolicy::All,
        ..Default::default()
    };
    let mut consumer =
        stream.create_consumer(config).await.map_err(|e| ClusterError::js(format!("read {subject}"), e))?;
    let pending = consumer.info().await.map_err(|e| ClusterError::js(format!("read {subject}"), e))?.num_pending;
    let (mut entries, mut last) = (Vec::new(), 0);
    if pending == 0 {
        return Ok((entries, last));
    }
    let mut messages = consumer.messages().await.map_err(|e| ClusterError::js(format!("read {subject}"), e))?;
    while let Some(m) = messages.next().await {
        let m = m.map_err(|e| ClusterError::js(format!("read {subject}"), e))?;
        let info = m.info().map_err(|e| ClusterError::JetStream { what: format!("read {subject}"), source: e })?;
        let (sequence, left) = (info.stream_sequence, info.pending);
        let is_object = serde_json::from_slice::<serde_json::Value>(&m.payload).map(|v| v.is_object());
        match is_object {
            Ok(true) => {}
            Ok(false) => {
                return Err(ClusterError::BadEntry {
                    subject: subject.to_string(),
                    sequence,
                    why: "JSON, but not an object".into(),
                });
            }
            Err(e) => {
                return Err(ClusterError::BadEntry { subject: subject.to_string(), sequence, why: e.to_string() });
            }
        }
        entries.push(m.payload.to_vec());
        last = sequence;
        if left == 0 {
            break;
        }
    }
    Ok((entries, last))
}
