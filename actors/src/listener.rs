//! The accept loop of every door and of the host API: HTTP/1.1 with a deadline on reading a
//! request's headers and a cap on open connections, so idle or trickling clients (slowloris)
//! cannot hold a listener or the process.
//!
//! - A connection that has not sent a whole request head within [`HEADER_READ_TIMEOUT`] is
//!   closed (also between requests of a kept-alive connection).
//! - At most [`MAX_CONNECTIONS`] connections are served at once per listener; one more is
//!   accepted and closed at once (the client sees a reset, never a hang), and counted.
//! - On stop, the listener closes and each connection finishes its request in flight.
//! - With TLS, the handshake must also finish within [`HEADER_READ_TIMEOUT`]; a failed one
//!   closes the connection. Each request carries a [`Secure`] extension saying whether it came
//!   over TLS, so answers that name the server's URL use the right scheme.

use axum::Router;
use axum::extract::ConnectInfo;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};

/// Time a client has to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);

/// Connections served at once by one listener (SSE watchers included).
pub const MAX_CONNECTIONS: usize = 256;

/// The limits of one listener.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// Time a client has to send a request's headers.
    pub header_read_timeout: Duration,
    /// Connections served at once.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { header_read_timeout: HEADER_READ_TIMEOUT, max_connections: MAX_CONNECTIONS }
    }
}

/// Whether a request arrived over TLS (`https`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Secure(pub bool);

impl Secure {
    /// `https` or `http`.
    pub fn scheme(self) -> &'static str {
        if self.0 { "https" } else { "http" }
    }
}

/// Counters of one listener.
#[derive(Debug, Default)]
pub struct ListenerStats {
    /// Connections closed at once because the listener was full.
    pub refused: AtomicU64,
}

/// Serve `router` on `listener` until `stop` resolves, over TLS when `tls` is given. `what`
/// names the listener in logs.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    stop: impl Future<Output = ()> + Send,
    limits: Limits,
    stats: Arc<ListenerStats>,
    what: &'static str,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let (closing_tx, closing_rx) = watch::channel(false);
    tokio::pin!(stop);
    loop {
        let (stream, peer) = tokio::select! {
            _ = &mut stop => break,
            accepted = listener.accept() => match accepted {
                Ok(a) => a,
                Err(e) => {
                    // Out of descriptors or a transient error: back off briefly instead of spinning.
                    tracing::warn!(listener = what, error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            },
        };
        // Frames are written as they happen: a small write must not wait for the client's
        // delayed ACK of the one before (Nagle), up to 40 ms on a kept-alive connection.
        let _ = stream.set_nodelay(true);
        let Ok(permit) = slots.clone().try_acquire_owned() else {
            let n = stats.refused.fetch_add(1, Ordering::Relaxed) + 1;
            if n.is_power_of_two() {
                tracing::warn!(listener = what, refused = n, "connection limit reached; closing new connections");
            }
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(
            router.clone().layer(axum::Extension(ConnectInfo(peer))).layer(axum::Extension(Secure(tls.is_some()))),
        );
        let closing = closing_rx.clone();
        let tls = tls.clone();
        tokio::spawn(async move {
            match tls {
                None => connection(stream, service, limits, closing).await,
                Some(acceptor) => {
                    match tokio::time::timeout(limits.header_read_timeout, acceptor.accept(stream)).await {
                        Ok(Ok(s)) => connection(s, service, limits, closing).await,
                        Ok(Err(e)) => tracing::debug!(listener = what, error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!(listener = what, "TLS handshake timed out"),
                    }
                }
            }
            drop(permit);
        });
    }
    let _ = closing_tx.send(true);
}

/// Serve one connection until it ends, or finish its request in flight once `closing` is set.
async fn connection<S>(io: S, service: TowerToHyperService<Router>, limits: Limits, mut closing: watch::Receiver<bool>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(TokioTimer::new()).header_read_timeout(limits.header_read_timeout);
    let conn = builder.serve_connection(TokioIo::new(io), service).with_upgrades();
    tokio::pin!(conn);
    let closing = async move {
        // The watch guard must not live across an await of the connection.
        let _ = closing.wait_for(|c| *c).await.map(|_| ());
    };
    tokio::select! {
        _ = conn.as_mut() => {}
        () = closing => {
            conn.as_mut().graceful_shutdown();
            let _ = conn.await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    async fn closed_by_server(s: &mut TcpStream) -> bool {
        let mut buf = [0u8; 64];
        matches!(tokio::time::timeout(Duration::from_secs(10), s.read(&mut buf)).await, Ok(Ok(0) | Err(_)))
    }

    async fn answered(addr: SocketAddr) -> bool {
        let Ok(mut s) = TcpStream::connect(addr).await else { return false };
        if s.write_all(b"GET / HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n").await.is_err() {
            return false;
        }
        let mut out = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(10), s.read_to_end(&mut out)).await;
        out.starts_with(b"HTTP/1.1 200")
    }

    #[tokio::test]
    async fn slowloris_clients_are_cut_off_and_a_full_listener_closes_new_connections_at_once() {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let router = Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let limits = Limits { header_read_timeout: Duration::from_millis(300), max_connections: 8 };
        let stats = Arc::new(ListenerStats::default());
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(serve(
            listener,
            router,
            async {
                let _ = stop_rx.await;
            },
            limits,
            stats.clone(),
            "test",
            None,
        ));
        // Eight clients trickle half a request head and stall.
        let mut slow = Vec::new();
        for _ in 0..8 {
            let mut s = TcpStream::connect(addr).await.expect("connect");
            s.write_all(b"GET / HTTP/1.1\r\nhost: 127.0").await.expect("partial head");
            slow.push(s);
        }
        // The listener is full: one more connection is closed at once, never left hanging.
        let mut extra = TcpStream::connect(addr).await.expect("connect");
        assert!(closed_by_server(&mut extra).await, "a connection past the limit is closed");
        // The stalled clients are cut off at the header deadline, freeing their slots.
        for s in &mut slow {
            assert!(closed_by_server(s).await, "a stalled client is cut off");
        }
        assert!(answered(addr).await, "the listener serves again");
        assert!(stats.refused.load(Ordering::Relaxed) >= 1);
        let _ = stop_tx.send(());
        server.await.expect("stops");
    }
}
