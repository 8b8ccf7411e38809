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
