//! A clustered session's frames on JetStream: one writer task per emitter appends the
//! numbered frames to the session's `frames` subject (fenced like every journal record) and
//! only then hands them back to the emitter to keep and send. Frames without an id pass
//! through in order. A watcher therefore never sees a frame that a later owner, resuming from
//! the stream, could number again.
//!
//! The frames waiting when an append starts go in that one append: an entry is one frame line
//! (`{"id", "event", "data"}`) or, when several were waiting, a batch of them
//! ([`StreamLog::append_all`]). A burst (a status, text chunks, tool
//! progress) then costs one acknowledged round trip instead of one per frame; readers take
//! both forms ([`frames_of`]).

use capsule_protocol::frame::{NumberedFrame, Published, SharedFrame};
use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::mpsc;

use super::StreamLog;
use crate::emitter::EmitterMsg;

/// What the emitter hands its writer, in order.
pub enum Pending {
    /// A frame (stored first when it has an id).
    Frame(SharedFrame),
    /// The session's `Close`, answered after every frame before it.
    Close(RpcReplyPort<()>),
}

/// Start the writer of `log`; it stops when the emitter drops the sender, or when an append
/// fails (fenced: another host owns the session; or JetStream did not answer within its
/// patience), after which nothing more is stored or sent.
pub fn writer(mut log: StreamLog, emitter: ActorRef<EmitterMsg>) -> mpsc::UnboundedSender<Pending> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
    tokio::spawn(async move {
        while let Some(first) = rx.recv().await {
            // Frames sent in one burst (a turn's status after the result's artifact, a driver's
            // streamed chunks) reach this task one by one; letting the tasks that are ready run
            // first takes the rest of the burst into this append, at no wait when there is none.
            tokio::task::yield_now().await;
            // Take what is already waiting, up to a close; `append_all` makes entries of it.
            let (mut batch, mut close, mut next) = (Vec::new(), None, Some(first));
            while let Some(p) = next.take() {
                match p {
                    Pending::Close(reply) => close = Some(reply),
                    Pending::Frame(n) => {
                        batch.push(n);
                        next = rx.try_recv().ok();
                    }
                }
            }
            let lines = batch.iter().filter(|n| n.id.is_some()).map(|n| n.json_line().into_bytes()).collect();
            if let Err(e) = log.append_all(lines).await {
                tracing::error!(subject = log.subject(), error = %e, "frames were not stored; no more frames are sent");
                return;
            }
            for n in batch {
                if emitter.cast(EmitterMsg::Stored(n)).is_err() {
                    return;
                }
            }
            if let Some(reply) = close {
                let _ = emitter.cast(EmitterMsg::Closed(reply));
            }
        }
    });
    tx
}

/// The frames of one stored entry, in order: a frame line, or a batch of them. `None` when the
/// entry is neither (or a line in the batch is not a frame).
pub fn frames_of(entry: &[u8]) -> Option<Vec<NumberedFrame>> {
    super::records_of(entry).ok()?.into_iter().map(crate::emitter::parse_frame).collect()
}

/// Follow `session`'s frames on JetStream from any host: first those already stored after
/// `after` (a `Last-Event-ID`; `None`: from the first), then each new one as its owner stores
/// it, whichever host that is, in id order. Frames come from an ordered consumer of the frames
/// subject, so a session that moved to another host continues on the same subject with no
/// gap and no repeat. Ends when the receiver is dropped.
pub async fn follow(
    js: &async_nats::jetstream::Context,
    session: &str,
    after: Option<u64>,
) -> Result<mpsc::Receiver<SharedFrame>, super::ClusterError> {
    use async_nats::jetstream::consumer::pull::OrderedConfig;
    use futures::StreamExt;
    let subject = super::subject(session, super::Record::Frames)?;
    let messages = super::log::patiently(|| async {
        let stream = js
            .get_stream(super::JOURNAL_STREAM)
            .await
            .map_err(|e| super::ClusterError::js("find the journal stream", e))?;
        let consumer = stream
            .create_consumer(OrderedConfig { filter_subject: subject.clone(), ..Default::default() })
            .await
            .map_err(|e| super::ClusterError::js(format!("follow {subject}"), e))?;
        consumer.messages().await.map_err(|e| super::ClusterError::js(format!("follow {subject}"), e))
    })
    .await?;
    let (tx, rx) = mpsc::channel(128);
    let mut last = after.unwrap_or(0);
    let js = js.clone();
    let session = session.to_string();
    tokio::spawn(async move {
        let mut messages = std::pin::pin!(messages);
        let mut check = tokio::time::interval(ENDED_CHECK);
        loop {
            tokio::select! {
                m = messages.next() => {
                    let Some(m) = m else { return };
                    let Ok(m) = m else { continue };
                    let Some(frames) = frames_of(&m.payload) else {
                        tracing::warn!(subject = %m.subject, "{}: a frames entry not in this runtime's format is skipped", capsule_protocol::Code::ClusterBadEntry);
                        continue;
                    };
                    for frame in frames {
                        match frame.id {
                            Some(id) if id > last => last = id,
                            _ => continue,
                        }
                        if tx.send(Published::new(frame)).await.is_err() {
                            return;
                        }
                    }
                }
                _ = check.tick() => {
                    if ended(&js, &session, &subject, last).await {
                        let _ = tx.send(Published::unnumbered(capsule_protocol::frame::Frame::CapsuleClosed {})).await;
                        return;
                    }
                }
            }
        }
    });
    Ok(rx)
}

/// How often a follower checks whether its session ended.
const ENDED_CHECK: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether `session` ended (no book entry and no lease: it was shut down, not lost) and its
/// follower has had every stored frame (`last` is the last id of `subject`).
async fn ended(js: &async_nats::jetstream::Context, session: &str, subject: &str, last: u64) -> bool {
    use super::kv_read::latest;
    let gone = matches!(latest(js, super::SESSIONS_BUCKET, session).await, Ok(None))
        && matches!(latest(js, super::LEASE_BUCKET, session).await, Ok(None));
    if !gone {
        return false;
    }
    let Ok(stream) = js.get_stream(super::JOURNAL_STREAM).await else { return false };
    match stream.get_last_raw_message_by_subject(subject).await {
        Ok(m) => frames_of(&m.payload).and_then(|f| f.iter().filter_map(|f| f.id).max()).is_none_or(|id| id <= last),
        Err(_) => true,
    }
}
