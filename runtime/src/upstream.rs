//! Upstream connections, kept open and shared by every call in the process, and driven by the
//! call that uses them.
//!
//! wasmtime-wasi-http's own sender opens a fresh TCP connection for every request (and for
//! `https` builds a new TLS configuration and does a full handshake), so each driver call paid a
//! connection set-up: tens of microseconds on loopback, one or two round trips plus the
//! handshake against a real provider. Every request a guest's policy lets out goes through
//! [`send`] instead: a process-wide pool of HTTP/1.1 connections (keyed by scheme, host and
//! port) and one TLS configuration (webpki roots) built once.
//!
//! A connection has no task of its own. The call that took it from the pool polls it: the task
//! that sends the request writes it and reads the response head, and the guest's own reads of
//! the body read the socket. A pooled client with a task per connection (hyper-util's) hands
//! every request, response head and body piece from one task to another, and on a multi-thread
//! runtime most of those hand-offs wake the other worker thread.
//!
//! What does not change: the request is the one the policy decided (the key attached by the host,
//! redirects returned, never followed), one request per connection at a time, the response is read
//! by the guest through the same size limit. Nothing of a request stays on a pooled connection:
//! keys are per request, no cookies are kept. A connection goes back to the pool once its
//! response body was read to the end, or was dropped with only its end unread (a driver stops
//! at the provider's last event) and that end came within [`TAIL_WAIT`]: the one case in which a
//! connection is read by a task of its own (see [`Body`]'s `Drop`). A body abandoned earlier
//! closes it. An idle connection is closed when it is found older than [`IDLE`] or closed by the
//! server at its next use, and at most [`IDLE_PER_HOST`] are kept per upstream. A request that a reused connection turned away
//! before writing any of it (the server closed it meanwhile) goes out on another connection.
//! Timeouts keep wasi:http's meaning: the connection and the response head within
//! `connect + first byte`, then at most `between bytes` of silence in the body (600 s each
//! unless the guest sets them; the gateway's own call deadline is shorter).

use bytes::Bytes;
use http::Uri;
use hyper::body::Incoming;
use hyper::client::conn::http1;
use hyper_util::rt::TokioIo;
use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock, Mutex};
use std::task::{Context, Poll, ready};
use std::time::{Duration, Instant};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use wasmtime_wasi_http::{Error as HttpError, RequestOptions, WasiBody};

/// How long an idle pooled connection is kept.
const IDLE: Duration = Duration::from_secs(30);
/// Idle connections kept per upstream.
const IDLE_PER_HOST: usize = 16;
/// wasi:http's default for each of its timeouts.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// A connection to an upstream: plain TCP or TLS over it.
enum Stream {
    Plain(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_flush(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        match self.get_mut() {
            Stream::Plain(s) => Pin::new(s).poll_write_vectored(cx, bufs),
            Stream::Tls(s) => Pin::new(s.as_mut()).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Stream::Plain(s) => s.is_write_vectored(),
            Stream::Tls(s) => s.is_write_vectored(),
        }
    }
}

/// Why a connection could not be made; kept whole so the guest's error code names the case.
#[derive(Debug, thiserror::Error)]
enum ConnectError {
    #[error("the request has no host")]
    NoHost,
    #[error("connecting failed: {0}")]
    Tcp(#[source] std::io::Error),
    #[error("the host name is not a valid TLS server name")]
    Name(#[source] rustls::pki_types::InvalidDnsNameError),
    #[error("TLS failed: {0}")]
    Tls(#[source] std::io::Error),
    #[error("the HTTP/1.1 handshake failed: {0}")]
    Handshake(#[source] hyper::Error),
}

/// Which pooled connections may carry a request.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Key {
    https: bool,
    host: String,
    port: u16,
}

impl Key {
    fn of(uri: &Uri) -> Result<Key, ConnectError> {
        let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
        let host = uri.host().ok_or(ConnectError::NoHost)?.trim_start_matches('[').trim_end_matches(']');
        let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
        Ok(Key { https, host: host.to_string(), port })
    }
}

/// One open HTTP/1.1 connection: the handle requests are given to, and the connection itself,
/// which makes progress only while somebody polls it.
struct Link {
    sender: http1::SendRequest<WasiBody>,
    conn: http1::Connection<TokioIo<Stream>, WasiBody>,
}

impl Link {
    /// Drive the connection; `true` once it has ended (closed, or failed).
    fn drive(&mut self, cx: &mut Context<'_>) -> bool {
        Pin::new(&mut self.conn).poll(cx).is_ready()
    }
}

static TLS: LazyLock<tokio_rustls::TlsConnector> = LazyLock::new(|| {
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|e| panic!("ring offers TLS 1.2 and 1.3: {e}"));
    tokio_rustls::TlsConnector::from(Arc::new(config))
});

/// Idle connections per upstream, the most recently used last, each with when it went idle.
type Idle = HashMap<Key, Vec<(Link, Instant)>>;

static POOL: LazyLock<Mutex<Idle>> = LazyLock::new(Default::default);

fn pool() -> std::sync::MutexGuard<'static, Idle> {
    POOL.lock().unwrap_or_else(|p| p.into_inner())
}

/// An idle connection to `key` that is still open, if there is one.
fn checkout(key: &Key) -> Option<Link> {
    let mut pool = pool();
    let idle = pool.get_mut(key)?;
    while let Some((mut link, since)) = idle.pop() {
        // A connection the server closed meanwhile shows it at once (EOF is waiting).
        let mut cx = Context::from_waker(std::task::Waker::noop());
        if since.elapsed() < IDLE && !link.sender.is_closed() && !link.drive(&mut cx) {
            return Some(link);
        }
    }
    None
}

/// Put a connection whose exchange is complete back, if it can carry another request.
fn checkin(key: Key, mut link: Link, cx: &mut Context<'_>) {
    // Let the connection take in the end of the message it was reading.
    if link.drive(cx) || link.sender.is_closed() {
        return;
    }
    let mut pool = pool();
    let idle = pool.entry(key).or_default();
    if idle.len() >= IDLE_PER_HOST {
        idle.remove(0);
    }
    idle.push((link, Instant::now()));
}

/// Open a connection to `key`.
async fn connect(key: &Key) -> Result<Link, ConnectError> {
    let tcp = TcpStream::connect((key.host.as_str(), key.port)).await.map_err(ConnectError::Tcp)?;
    // Requests are written whole; nothing is gained by waiting to fill a segment.
    let _ = tcp.set_nodelay(true);
    let stream = if key.https {
        let name = rustls::pki_types::ServerName::try_from(key.host.clone()).map_err(ConnectError::Name)?;
        Stream::Tls(Box::new(TLS.connect(name, tcp).await.map_err(ConnectError::Tls)?))
    } else {
        Stream::Plain(tcp)
    };
    let (sender, conn) = http1::handshake(TokioIo::new(stream)).await.map_err(ConnectError::Handshake)?;
    Ok(Link { sender, conn })
}

/// The error the guest sees for a connection that could not be made.
fn connect_error(e: ConnectError) -> HttpError {
    match e {
        ConnectError::NoHost => HttpError::HttpRequestUriInvalid,
        ConnectError::Tcp(io) => HttpError::Connect(io),
        ConnectError::Name(_) => {
            HttpError::DnsError { rcode: Some("not a valid TLS server name".into()), info_code: None }
        }
        ConnectError::Tls(io) => HttpError::Tls(io),
        ConnectError::Handshake(h) => exchange_error(&h),
    }
}

/// The error the guest sees for an exchange that failed.
fn exchange_error(h: &hyper::Error) -> HttpError {
    if h.is_timeout() {
        HttpError::HttpResponseTimeout
    } else if h.is_closed() || h.is_incomplete_message() || h.is_canceled() {
        HttpError::ConnectionTerminated
    } else {
        HttpError::HttpProtocolError
    }
}

/// Send `request` on a pooled connection to `key` (or a new one) and read the response head;
/// the connection comes back with it, for the body.
async fn exchange(
    key: &Key,
    mut request: http::Request<WasiBody>,
) -> Result<(http::Response<Incoming>, Link), HttpError> {
    loop {
        let (mut link, reused) = match checkout(key) {
            Some(link) => (link, true),
            None => (connect(key).await.map_err(connect_error)?, false),
        };
        // The connection says when it can take a request once it has been polled.
        let ready = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = link.sender.poll_ready(cx) {
                return Poll::Ready(r.is_ok());
            }
            if link.drive(cx) {
                return Poll::Ready(false);
            }
            link.sender.poll_ready(cx).map(|r| r.is_ok())
        })
        .await;
        if !ready {
            if reused {
                continue;
            }
            return Err(HttpError::ConnectionTerminated);
        }
        let mut answer = std::pin::pin!(link.sender.try_send_request(request));
        let answer = std::future::poll_fn(|cx| {
            if let Poll::Ready(r) = answer.as_mut().poll(cx) {
                return Poll::Ready(Some(r));
            }
            // Writing the request and reading the answer happen here, in this task.
            let ended = link.drive(cx);
            match answer.as_mut().poll(cx) {
                Poll::Ready(r) => Poll::Ready(Some(r)),
                Poll::Pending if ended => Poll::Ready(None),
                Poll::Pending => Poll::Pending,
            }
        })
        .await;
        match answer {
            Some(Ok(response)) => return Ok((response, link)),
            // The connection ended without answering (the dispatcher answers every request it
            // took before it ends; this is the case where it never took this one).
            None => return Err(HttpError::ConnectionTerminated),
            Some(Err(mut e)) => match e.take_message() {
                // Turned away before any of it was written: another connection may carry it.
                Some(again) if reused => request = again,
                _ => return Err(exchange_error(e.error())),
            },
        }
    }
}
/// A response body with wasi:http's `between-bytes` timeout. Reading it drives its connection,
/// which goes back to the pool once the body has been read to the end.
pub(crate) struct Body {
    /// `None` only while being dropped (its tail may go on being read, see `Drop`).
    inner: Option<Incoming>,
    /// The connection the body arrives on; `None` once it ended or went back to the pool.
    link: Option<(Key, Link)>,
    gap: Duration,
    silence: Pin<Box<tokio::time::Sleep>>,
}

impl Body {
    /// The body's next frame, if it is here.
    fn next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        let Some(inner) = self.inner.as_mut() else { return Poll::Ready(None) };
        match http_body::Body::poll_frame(Pin::new(inner), cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let until = tokio::time::Instant::now() + self.gap;
                self.silence.as_mut().reset(until);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                // A connection that failed mid-body is not reused.
                self.link = None;
                Poll::Ready(Some(Err(if e.is_timeout() { HttpError::HttpResponseTimeout } else { e.into() })))
            }
            Poll::Ready(None) => {
                if let Some((key, link)) = self.link.take() {
                    checkin(key, link, cx);
                }
                Poll::Ready(None)
            }
            Poll::Pending => Poll::Pending,
        }
    }

    /// The body's next frame: what is buffered, else what reading the socket once brings.
    fn next_driven(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        if let Poll::Ready(frame) = self.next(cx) {
            return Poll::Ready(frame);
        }
        let Some((_, link)) = self.link.as_mut() else { return Poll::Pending };
        if link.drive(cx) {
            self.link = None;
        }
        self.next(cx)
    }
}

/// What a dropped body may still read to reach its end (see [`Body`]'s `Drop`): at most this
/// many bytes, within [`TAIL_WAIT`]. A body abandoned with more unread, or whose end is
/// slower, closes its connection.
const DRAIN_BYTES: usize = 64 * 1024;
const TAIL_WAIT: Duration = Duration::from_secs(1);

/// The rest of a body its reader dropped, on its connection, read to see whether the
/// connection can carry another request.
struct Tail {
    body: Incoming,
    key: Key,
    link: Link,
    read: usize,
}

impl Tail {
    /// `Ready(true)` once the body's end was read (the connection may go back to the pool),
    /// `Ready(false)` if the connection cannot be reused (it failed or ended, or more than
    /// [`DRAIN_BYTES`] came), `Pending` while the end is still to come.
    fn read(&mut self, cx: &mut Context<'_>) -> Poll<bool> {
        loop {
            let frame = match http_body::Body::poll_frame(Pin::new(&mut self.body), cx) {
                Poll::Pending if self.link.drive(cx) => return Poll::Ready(false),
                Poll::Pending => ready!(http_body::Body::poll_frame(Pin::new(&mut self.body), cx)),
                Poll::Ready(frame) => frame,
            };
            match frame {
                Some(Ok(f)) => {
                    self.read += f.data_ref().map_or(0, Bytes::len);
                    if self.read > DRAIN_BYTES {
                        return Poll::Ready(false);
                    }
                }
                Some(Err(_)) => return Poll::Ready(false),
                None => return Poll::Ready(true),
            }
        }
    }
}

impl Drop for Body {
    /// A reader that stopped at the end of what it wanted (a driver stops at the provider's
    /// last event) leaves only the end of the body unread, and that end is often still on its
    /// way: the server writes it just after the last event. What has arrived is read here; if
    /// the end is not among it, a task of the runtime the body was dropped on waits for it, at
    /// most [`TAIL_WAIT`] and [`DRAIN_BYTES`], and the connection goes back to the pool when it
    /// comes. Otherwise (or with no runtime here) the connection is closed, so a provider whose
    /// answer was abandoned midway stops sending it.
    fn drop(&mut self) {
        let (Some(body), Some((key, link))) = (self.inner.take(), self.link.take()) else { return };
        let mut tail = Tail { body, key, link, read: 0 };
        let mut cx = Context::from_waker(std::task::Waker::noop());
        match tail.read(&mut cx) {
            Poll::Ready(true) => checkin(tail.key, tail.link, &mut cx),
            Poll::Ready(false) => {}
            Poll::Pending => {
                if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                    drop(runtime.spawn(read_tail(tail)));
                }
            }
        }
    }
}

/// Wait for the end of a dropped body (see [`Body`]'s `Drop`), then put its connection back.
async fn read_tail(mut tail: Tail) {
    let ended = tokio::time::timeout(TAIL_WAIT, std::future::poll_fn(|cx| tail.read(cx))).await;
    if matches!(ended, Ok(true)) {
        checkin(tail.key, tail.link, &mut Context::from_waker(std::task::Waker::noop()));
    }
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        let this = &mut *self;
        if let Poll::Ready(frame) = this.next_driven(cx) {
            return Poll::Ready(frame);
        }
        ready!(this.silence.as_mut().poll(cx));
        Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
    }

    fn is_end_stream(&self) -> bool {
        self.inner.as_ref().is_none_or(http_body::Body::is_end_stream)
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.as_ref().map(http_body::Body::size_hint).unwrap_or_default()
    }
}

/// Send a request the policy let out, on a pooled connection; the response body is streamed.
pub(crate) async fn send(
    mut request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Result<http::Response<Body>, HttpError> {
    let opt = |f: fn(&RequestOptions) -> Option<Duration>| options.as_ref().and_then(f).unwrap_or(DEFAULT_TIMEOUT);
    let head = opt(|o| o.connect_timeout).saturating_add(opt(|o| o.first_byte_timeout));
    let gap = opt(|o| o.between_bytes_timeout).max(Duration::from_nanos(1));
    let key = Key::of(request.uri()).map_err(connect_error)?;
    // The request line carries the path; the host goes in `host` (the policy sets it for the
    // gateway's requests, wasi:http for the others).
    if !request.headers().contains_key(http::header::HOST)
        && let Some(authority) = request.uri().authority()
        && let Ok(value) = http::HeaderValue::from_str(authority.as_str())
    {
        request.headers_mut().insert(http::header::HOST, value);
    }
    let path = request.uri().path_and_query().map_or("/", |p| p.as_str());
    *request.uri_mut() = path.parse().map_err(|_| HttpError::HttpRequestUriInvalid)?;
    let (response, link) = match tokio::time::timeout(head, exchange(&key, request)).await {
        Ok(answer) => answer?,
        Err(_) => return Err(HttpError::ConnectionReadTimeout),
    };
    let silence = Box::pin(tokio::time::sleep(gap));
    Ok(response.map(|inner| Body { inner: Some(inner), link: Some((key, link)), gap, silence }))
}

#[cfg(test)]
#[path = "upstream_tests.rs"]
mod tests;
