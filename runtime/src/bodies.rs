//! The HTTP bodies the outgoing hook ([`crate::policy`]) wraps: a response's, cut at the
//! call's `limits.response_bytes`, and a request's, which signals when hyper has taken the
//! whole of it (the call's wait for its answer begins: [`crate::ahead`]).

use crate::ahead::Sent;
use bytes::Bytes;
use http_body_util::BodyExt;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use wasmtime_wasi_http::{Error as HttpError, WasiBody};

/// The cap on one HTTP response's body (`limits.response_bytes`), and whether a call hit it.
#[derive(Clone, Debug)]
pub(crate) struct ResponseLimit {
    pub bytes: u64,
    pub hit: Arc<AtomicBool>,
}

/// A response body that ends with `HttpResponseBodySize` once it has carried more than the
/// limit (an endless or oversized provider stream), and records that it did.
pub(crate) struct LimitedBody<B> {
    pub(crate) inner: B,
    pub(crate) left: u64,
    pub(crate) limit: ResponseLimit,
}

impl<B> http_body::Body for LimitedBody<B>
where
    B: http_body::Body<Data = Bytes> + Unpin,
    B::Error: Into<HttpError>,
{
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match polled {
            Poll::Ready(Some(Ok(frame))) => {
                let n = frame.data_ref().map_or(0, |d| d.len() as u64);
                if n > self.left {
                    self.limit.hit.store(true, Ordering::SeqCst);
                    self.left = 0;
                    return Poll::Ready(Some(Err(HttpError::HttpResponseBodySize(Some(self.limit.bytes)))));
                }
                self.left -= n;
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => Poll::Ready(Some(Err(e.into()))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }
}

/// `request` with its body giving `sent` when hyper has taken the whole of it: at its end, at
/// a failure, or when hyper drops it after taking some of it (a body with a `content-length`
/// is dropped once that many bytes are taken, never polled to its end). The request is then
/// out, and the worker waits for the answer. A body dropped untouched (a request refused) only
/// drops `sent`.
pub(crate) fn when_sent(request: http::Request<WasiBody>, sent: Option<Sent>) -> http::Request<WasiBody> {
    match sent {
        None => request,
        Some(sent) => request.map(|inner| SignalAtEnd { inner, sent: Some(sent), taken: false }.boxed_unsync()),
    }
}

/// A request body that signals its end.
struct SignalAtEnd {
    inner: WasiBody,
    sent: Option<Sent>,
    /// Whether hyper has taken a frame of it.
    taken: bool,
}

impl Drop for SignalAtEnd {
    fn drop(&mut self) {
        if self.taken {
            self.signal();
        }
    }
}

impl SignalAtEnd {
    fn signal(&mut self) {
        if let Some(sent) = self.sent.take() {
            sent.fire();
        }
    }
}

impl http_body::Body for SignalAtEnd {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        self.taken |= polled.is_ready();
        if matches!(polled, Poll::Ready(None | Some(Err(_)))) || self.inner.is_end_stream() {
            self.signal();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
