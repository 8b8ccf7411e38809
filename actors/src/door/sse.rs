//! SSE bodies: frames from a subscription, written as `id:`/`event:`/`data:` lines, with a
//! heartbeat comment while idle, ending after a chosen frame or when the capsule closes.

use axum::body::Body;
use axum::http::{HeaderValue, Response, StatusCode, header};
use bytes::Bytes;
use capsule_protocol::frame::{Frame, Published, SharedFrame};
use tokio::sync::mpsc;

use super::HEARTBEAT;

/// When a stream ends by itself.
pub enum Until {
    /// Never (watch): only when the capsule closes or the client leaves.
    Closed,
    /// After the final status of this task.
    FinalOf(String),
}

/// A `text/event-stream` response.
pub fn response(body: Body) -> Response<Body> {
    let mut r = Response::new(body);
    *r.status_mut() = StatusCode::OK;
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
    r.headers_mut().insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    r
}

/// A stream of the given leading frames, then the subscription's frames.
pub fn stream(
    lead: Vec<SharedFrame>,
    mut rx: mpsc::Receiver<SharedFrame>,
    until: Until,
    only_task: Option<String>,
) -> Body {
    let (tx, out) = mpsc::channel::<Result<Bytes, std::io::Error>>(16);
    tokio::spawn(async move {
        for f in lead {
            if tx.send(Ok(Bytes::from(f.to_sse()))).await.is_err() {
                return;
            }
        }
        let mut beat = tokio::time::interval(HEARTBEAT);
        beat.tick().await;
        loop {
            tokio::select! {
                f = rx.recv() => {
                    let Some(f) = f else {
                        // The emitter dropped this subscription: the session is closing. A
                        // watcher whose queue was full may have missed the emitter's own
                        // `capsule-closed`, so the door writes it (a duplicate is harmless: the
                        // stream ends at the first).
                        if matches!(until, Until::Closed) {
                            let closed = Published::unnumbered(Frame::CapsuleClosed {});
                            let _ = tx.send(Ok(Bytes::from(closed.to_sse()))).await;
                        }
                        return;
                    };
                    if let Some(task) = &only_task {
                        let mine = match &f.frame {
                            Frame::Status { id, .. } | Frame::Text { id, .. } | Frame::Thinking { id, .. }
                            | Frame::ToolCallStarted { id, .. } | Frame::ToolCallProgress { id, .. } | Frame::Artifact { id, .. } => id == task,
                            _ => true,
                        };
                        if !mine { continue; }
                    }
                    let end = match (&until, &f.frame) {
                        (Until::FinalOf(t), Frame::Status { id, is_final: true, .. }) => id == t,
                        (_, Frame::CapsuleClosed {}) => true,
                        _ => false,
                    };
                    if tx.send(Ok(Bytes::from(f.to_sse()))).await.is_err() {
                        return;
                    }
                    if end {
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
    Body::from_stream(tokio_stream_from(out))
}

fn tokio_stream_from(
    mut rx: mpsc::Receiver<Result<Bytes, std::io::Error>>,
) -> impl futures::Stream<Item = Result<Bytes, std::io::Error>> {
    futures::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// A one-frame stream: an `error` frame, for a stream request that cannot be served.
pub fn error_stream(message: String) -> Response<Body> {
    let f = Published::unnumbered(Frame::Error { error: message });
    response(Body::from(f.to_sse()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test(start_paused = true)]
    async fn an_idle_stream_writes_a_heartbeat_comment_every_15_seconds() {
        let (_tx, rx) = mpsc::channel::<SharedFrame>(4);
        let mut body = stream(Vec::new(), rx, Until::Closed, None);
        let first = tokio::time::timeout(HEARTBEAT + std::time::Duration::from_millis(10), body.frame())
            .await
            .expect("a heartbeat within 15 s")
            .expect("frame")
            .expect("ok");
        assert_eq!(first.into_data().expect("data"), Bytes::from_static(b":heartbeat\n\n"));
        let early = tokio::time::timeout(HEARTBEAT - std::time::Duration::from_millis(10), body.frame()).await;
        assert!(early.is_err(), "no second heartbeat before another 15 s");
    }
}
