//! A2A streams: each event is one JSON-RPC response (`{"jsonrpc","id","result"}`) on one SSE
//! `data:` line. The stream ends after the task's final status update; if the capsule closes
//! first, it ends with a JSON-RPC error saying so. A heartbeat comment keeps an idle stream
//! open, as on the Murmur door.

use axum::body::Body;
use axum::response::Response;
use bytes::Bytes;
use capsule_protocol::frame::{Frame, SharedFrame};
use serde_json::Value;
use tokio::sync::mpsc;

use super::events::{Mapped, TaskEvents};
use crate::door::HEARTBEAT;
use crate::door::rpc::{self, code};

fn line(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// What a stream is made of: the request id its events answer, the events sent first and the
/// task's mapper for the frames that follow.
pub struct Plan {
    /// The JSON-RPC id of the request.
    pub request_id: Value,
    /// Results sent before any frame (the task snapshot).
    pub lead: Vec<Value>,
    /// Whether `lead` already ends the task (no frames follow).
    pub ended: bool,
    /// The task's mapper.
    pub events: TaskEvents,
}

/// The `text/event-stream` response for `plan`, fed by `rx`.
pub fn respond(plan: Plan, mut rx: mpsc::Receiver<SharedFrame>) -> Response {
    let (tx, mut out) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    let Plan { request_id, lead, ended, mut events } = plan;
    tokio::spawn(async move {
        for r in &lead {
            if tx.send(Ok(line(&rpc::ok(&request_id, r.clone())))).await.is_err() {
                return;
            }
        }
        if ended {
            return;
        }
        let mut beat = tokio::time::interval(HEARTBEAT);
        beat.tick().await;
        loop {
            tokio::select! {
                f = rx.recv() => {
                    let closed = match &f {
                        None => true,
                        Some(n) => matches!(n.frame, Frame::CapsuleClosed {}),
                    };
                    if closed {
                        let e = rpc::err(&request_id, code::INTERNAL, "the capsule closed before the task ended; resume the session and subscribe to the task again");
                        let _ = tx.send(Ok(line(&e))).await;
                        return;
                    }
                    let Some(f) = f else { return };
                    let (result, end) = match events.map(&f.frame) {
                        Mapped::Nothing => continue,
                        Mapped::Event(e) => (e, false),
                        Mapped::Final(e) => (e, true),
                    };
                    if tx.send(Ok(line(&rpc::ok(&request_id, result)))).await.is_err() || end {
                        return;
                    }
                }
                _ = beat.tick() => {
                    if tx.send(Ok(Bytes::from_static(b":heartbeat\n\n"))).await.is_err() {
                        return;
                    }
                }
            }
        }
    });
    crate::door::sse::response(Body::from_stream(futures::stream::poll_fn(move |cx| out.poll_recv(cx))))
}
