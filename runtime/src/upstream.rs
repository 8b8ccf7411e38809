//! Upstream connections, kept open and shared by every call in the process.
//!
//! wasmtime-wasi-http's own sender opens a fresh TCP connection for every request (and for
//! `https` builds a new TLS configuration and does a full handshake), so each driver call paid a
//! connection set-up: tens of microseconds on loopback, one or two round trips plus the
//! handshake against a real provider. Every request a guest's policy lets out goes through
//! [`send`] instead: one process-wide HTTP/1.1 client with a connection pool (keyed by scheme,
//! host and port), one TLS configuration (webpki roots) built once.
//!
//! What does not change: the request is the one the policy decided (the key attached by the host,
//! redirects returned, never followed), one request per connection at a time, the response is read
//! by the guest through the same size limit. Nothing of a request stays on a pooled connection:
//! keys are per request, the client keeps no cookies. Timeouts keep wasi:http's meaning: the
//! connection and the response head within `connect + first byte`, then at most
//! `between bytes` of silence in the body (600 s each unless the guest sets them; the
//! gateway's own call deadline is shorter).

use bytes::Bytes;
use http::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::{TokioExecutor, TokioIo};
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, LazyLock};
use std::task::{Context, Poll, ready};
use std::time::Duration;
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

impl Connection for Stream {
    fn connected(&self) -> Connected {
        Connected::new()
    }
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
}

/// Opens connections for the pool.
#[derive(Clone)]
struct Connector {
    tls: tokio_rustls::TlsConnector,
}

impl tower_service::Service<Uri> for Connector {
    type Response = TokioIo<Stream>;
    type Error = ConnectError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, ConnectError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ConnectError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let https = uri.scheme() == Some(&http::uri::Scheme::HTTPS);
            let host = uri.host().ok_or(ConnectError::NoHost)?.trim_start_matches('[').trim_end_matches(']');
            let port = uri.port_u16().unwrap_or(if https { 443 } else { 80 });
            let tcp = TcpStream::connect((host, port)).await.map_err(ConnectError::Tcp)?;
            // Requests are written whole; nothing is gained by waiting to fill a segment.
            let _ = tcp.set_nodelay(true);
            if !https {
                return Ok(TokioIo::new(Stream::Plain(tcp)));
            }
            let name = rustls::pki_types::ServerName::try_from(host.to_string()).map_err(ConnectError::Name)?;
            let tls = tls.connect(name, tcp).await.map_err(ConnectError::Tls)?;
            Ok(TokioIo::new(Stream::Tls(Box::new(tls))))
        })
    }
}

static CLIENT: LazyLock<Client<Connector, WasiBody>> = LazyLock::new(|| {
    let roots = rustls::RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.into() };
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .map(|b| b.with_root_certificates(roots).with_no_client_auth())
        .unwrap_or_else(|e| panic!("ring offers TLS 1.2 and 1.3: {e}"));
    Client::builder(TokioExecutor::new())
        .pool_idle_timeout(IDLE)
        .pool_max_idle_per_host(IDLE_PER_HOST)
        .build(Connector { tls: tokio_rustls::TlsConnector::from(Arc::new(config)) })
});

/// The error the guest sees for a failed exchange, from the client's error chain.
fn guest_error(e: hyper_util::client::legacy::Error) -> HttpError {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(&e);
    while let Some(c) = cause {
        if let Some(ce) = c.downcast_ref::<ConnectError>() {
            return match ce {
                ConnectError::NoHost => HttpError::HttpRequestUriInvalid,
                ConnectError::Tcp(io) => HttpError::Connect(std::io::Error::new(io.kind(), io.to_string())),
                ConnectError::Name(_) => {
                    HttpError::DnsError { rcode: Some("not a valid TLS server name".into()), info_code: None }
                }
                ConnectError::Tls(io) => HttpError::Tls(std::io::Error::new(io.kind(), io.to_string())),
            };
        }
        if let Some(h) = c.downcast_ref::<hyper::Error>() {
            return if h.is_timeout() {
                HttpError::HttpResponseTimeout
            } else if h.is_closed() || h.is_incomplete_message() || h.is_canceled() {
                HttpError::ConnectionTerminated
            } else {
                HttpError::HttpProtocolError
            };
        }
        cause = c.source();
    }
    if e.is_connect() { HttpError::ConnectionRefused } else { HttpError::HttpProtocolError }
}

/// A response body with wasi:http's `between-bytes` timeout.
pub(crate) struct Body {
    inner: hyper::body::Incoming,
    gap: Duration,
    silence: Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for Body {
    type Data = Bytes;
    type Error = HttpError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, HttpError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                let until = tokio::time::Instant::now() + self.gap;
                self.silence.as_mut().reset(until);
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                Poll::Ready(Some(Err(if e.is_timeout() { HttpError::HttpResponseTimeout } else { e.into() })))
            }
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => {
                ready!(self.silence.as_mut().poll(cx));
                Poll::Ready(Some(Err(HttpError::ConnectionReadTimeout)))
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Send a request the policy let out, on a pooled connection; the response body is streamed.
pub(crate) async fn send(
    request: http::Request<WasiBody>,
    options: Option<RequestOptions>,
) -> Result<http::Response<Body>, HttpError> {
    let opt = |f: fn(&RequestOptions) -> Option<Duration>| options.as_ref().and_then(f).unwrap_or(DEFAULT_TIMEOUT);
    let head = opt(|o| o.connect_timeout).saturating_add(opt(|o| o.first_byte_timeout));
    let gap = opt(|o| o.between_bytes_timeout).max(Duration::from_nanos(1));
    let response = match tokio::time::timeout(head, CLIENT.request(request)).await {
        Ok(answer) => answer.map_err(guest_error)?,
        Err(_) => return Err(HttpError::ConnectionReadTimeout),
    };
    let silence = Box::pin(tokio::time::sleep(gap));
    Ok(response.map(|inner| Body { inner, gap, silence }))
}
