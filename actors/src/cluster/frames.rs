//! A clustered session's frames on JetStream: one writer task per emitter appends each
//! numbered frame to the session's `frames` subject (fenced like every journal record) and
//! only then hands it back to the emitter to keep and send. Frames without an id pass
//! through in order. A watcher therefore never sees a frame that a later owner, resuming from
//! the stream, could number again.

use capsule_protocol::frame::NumberedFrame;
use ractor::{ActorRef, RpcReplyPort};
use tokio::sync::mpsc;

use super::StreamLog;
use crate::emitter::EmitterMsg;

/// What the emitter hands its writer, in order.
pub enum Pending {
    /// A frame (stored first when it has an id).
    Frame(NumberedFrame),
    /// The session's `Close`, answered after every frame before it.
    Close(RpcReplyPort<()>),
}

/// Start the writer of `log`; it stops when the emitter drops the sender, or when an append
/// fails (fenced: another host owns the session; or JetStream did not answer within its
/// patience), after which nothing more is stored or sent.
pub fn writer(mut log: StreamLog, emitter: ActorRef<EmitterMsg>) -> mpsc::UnboundedSender<Pending> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Pending>();
    tokio::spawn(async move {
        while let Some(p) = rx.recv().await {
            match p {
                Pending::Frame(n) => {
                    if n.id.is_some()
                        && let Err(e) = log.append(n.to_json_line().to_string().into_bytes()).await
                    {
                        tracing::error!(subject = log.subject(), error = %e, "a frame was not stored; no more frames are sent");
                        return;
                    }
                    if emitter.cast(EmitterMsg::Stored(n)).is_err() {
                        return;
                    }
                }
                Pending::Close(reply) => {
                    let _ = emitter.cast(EmitterMsg::Closed(reply));
                }
            }
        }
    });
    tx
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
) -> Result<mpsc::Receiver<NumberedFrame>, super::ClusterError> {
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
                    let Some(frame) = crate::emitter::parse_frame(&m.payload) else {
                        tracing::warn!(subject = %m.subject, "{}: a frames entry not in this runtime's format is skipped", capsule_protocol::Code::ClusterBadEntry);
                        continue;
                    };
                    match frame.id {
                        Some(id) if id > last => last = id,
                        _ => continue,
                    }
                    if tx.send(frame).await.is_err() {
                        return;
                    }
                }
                _ = check.tick() => {
                    if ended(&js, &session, &subject, last).await {
                        let _ = tx.send(NumberedFrame { id: None, frame: capsule_protocol::frame::Frame::CapsuleClosed {} }).await;
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
        Ok(m) => crate::emitter::parse_frame(&m.payload).and_then(|f| f.id).is_none_or(|id| id <= last),
        Err(_) => true,
    }
}
