//! The pooled client's tests, against loopback servers of their own.

use super::*;
use http_body_util::{BodyExt, Empty};
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// A loopback HTTP/1.1 server: every response is `body` with its length; `close` ends each
/// connection after one response (without saying so in the headers). Counts connections.
async fn server(body: &'static [u8], close: bool) -> (std::net::SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let Ok(n) = socket.read(&mut buf).await else { return };
                    if n == 0 {
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    // Requests here are GETs without a body: one ends at its blank line.
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
                        if socket.write_all(head.as_bytes()).await.is_err() || socket.write_all(body).await.is_err() {
                            return;
                        }
                        if close {
                            return;
                        }
                    }
                }
            });
        }
    });
    (addr, accepted)
}

/// A body far larger than what a dropped body may still read.
fn big() -> &'static [u8] {
    static BIG: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    BIG.get_or_init(|| vec![b'x'; 4 * 1024 * 1024])
}

fn get(addr: std::net::SocketAddr) -> http::Request<WasiBody> {
    http::Request::builder()
        .uri(format!("http://{addr}/path?q=1"))
        .body(Empty::<Bytes>::new().map_err(|_| HttpError::HttpProtocolError).boxed_unsync())
        .expect("request")
}

async fn fetch(addr: std::net::SocketAddr) -> Vec<u8> {
    let response = send(get(addr), None).await.expect("an answer");
    assert_eq!(response.status(), 200);
    response.into_body().collect().await.expect("the whole body").to_bytes().to_vec()
}

fn idle(addr: std::net::SocketAddr) -> usize {
    let key = Key { https: false, host: addr.ip().to_string(), port: addr.port() };
    pool().get(&key).map_or(0, Vec::len)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_one_after_another_share_one_connection_that_each_body_read_drives() {
    let (addr, accepted) = server(b"hello", false).await;
    for _ in 0..3 {
        assert_eq!(fetch(addr).await, b"hello");
        assert_eq!(idle(addr), 1, "a body read to its end puts its connection back");
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_whose_rest_has_arrived_gives_its_connection_back_when_dropped() {
    let (addr, accepted) = server(b"event: one\n\nevent: two\n\n", false).await;
    for _ in 0..3 {
        let response = send(get(addr), None).await.expect("an answer");
        let mut body = response.into_body();
        // A driver stops reading once it has the provider's last event, before the body
        // has said it ended.
        let first = body.frame().await.expect("a first piece").expect("data");
        assert!(!first.into_data().expect("data").is_empty());
        drop(body);
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "each dropped body's connection was reused");
}

/// A loopback server whose one response (`first` then `rest`, with its length) waits at each
/// `gate` permit before `rest`, as a provider's last event and the end of its body come in
/// separate writes. Counts connections; reports each connection's close by its client.
async fn gated_server(
    first: &'static [u8],
    rest: &'static [u8],
    gate: Arc<tokio::sync::Notify>,
) -> (std::net::SocketAddr, Arc<AtomicUsize>, tokio::sync::mpsc::UnboundedReceiver<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    let (closed, closes) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            let (gate, closed) = (gate.clone(), closed.clone());
            tokio::spawn(async move {
                let mut seen = Vec::new();
                let mut buf = [0u8; 4096];
                loop {
                    let n = socket.read(&mut buf).await.unwrap_or(0);
                    if n == 0 {
                        let _ = closed.send(());
                        return;
                    }
                    seen.extend_from_slice(&buf[..n]);
                    while let Some(end) = seen.windows(4).position(|w| w == b"\r\n\r\n") {
                        seen.drain(..end + 4);
                        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", first.len() + rest.len());
                        let _ = socket.write_all(head.as_bytes()).await;
                        let _ = socket.write_all(first).await;
                        // Waiting for the gate, the server still sees its client hang up.
                        tokio::select! {
                            () = gate.notified() => drop(socket.write_all(rest).await),
                            n = socket.read(&mut buf) => if n.unwrap_or(0) == 0 {
                                let _ = closed.send(());
                                return;
                            },
                        }
                    }
                }
            });
        }
    });
    (addr, accepted, closes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_whose_end_comes_after_it_was_dropped_gives_its_connection_back() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let (addr, accepted, _closes) = gated_server(b"event: last\n\n", b"\n", gate.clone()).await;
    let response = send(get(addr), None).await.expect("an answer");
    let mut body = response.into_body();
    let first = body.frame().await.expect("a first piece").expect("data");
    assert_eq!(first.into_data().expect("data"), &b"event: last\n\n"[..]);
    // The driver has its last event and drops the body; the end is still on its way.
    drop(body);
    assert_eq!(idle(addr), 0, "the end has not come yet");
    gate.notify_one();
    let deadline = Instant::now() + Duration::from_secs(10);
    while idle(addr) == 0 {
        assert!(Instant::now() < deadline, "the connection never went back to the pool");
        tokio::task::yield_now().await;
    }
    gate.notify_one();
    assert_eq!(fetch(addr).await, b"event: last\n\n\n");
    assert_eq!(accepted.load(Ordering::SeqCst), 1, "the second request went on the first connection");
}

#[tokio::test]
async fn a_dropped_body_whose_end_does_not_come_closes_its_connection() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let (addr, accepted, mut closes) = gated_server(b"event: one\n\n", b"event: never\n\n", gate).await;
    let response = send(get(addr), None).await.expect("an answer");
    let mut body = response.into_body();
    body.frame().await.expect("a first piece").expect("data");
    // From here on the clock moves only when everything waits (the exchange above ran on real
    // time: a paused clock would have jumped over its loopback round trips).
    tokio::time::pause();
    let dropped = tokio::time::Instant::now();
    drop(body);
    // The server never sends the rest: after the wait for it, the client hangs up, so a
    // provider whose answer was abandoned stops sending it.
    closes.recv().await.expect("the client closed the connection");
    assert!(dropped.elapsed() >= TAIL_WAIT, "closed after the wait for the end, not before");
    assert_eq!(idle(addr), 0);
    assert_eq!(accepted.load(Ordering::SeqCst), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_dropped_with_more_than_its_drain_left_closes_its_connection() {
    let (addr, accepted) = server(big(), false).await;
    let response = send(get(addr), None).await.expect("an answer");
    let mut body = response.into_body();
    body.frame().await.expect("a first piece").expect("data");
    drop(body);
    assert_eq!(idle(addr), 0, "a connection in the middle of a body is never pooled");
    assert_eq!(fetch(addr).await.len(), big().len());
    assert_eq!(accepted.load(Ordering::SeqCst), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_the_server_closed_while_idle_is_not_used_again() {
    let (addr, accepted) = server(b"once", true).await;
    for round in 1..=3 {
        assert_eq!(fetch(addr).await, b"once", "request {round}");
        // Wait until the client has seen the server's close, as an idle connection would.
        let deadline = Instant::now() + Duration::from_secs(10);
        let key = Key { https: false, host: addr.ip().to_string(), port: addr.port() };
        loop {
            match checkout(&key) {
                Some(link) => {
                    let mut cx = Context::from_waker(std::task::Waker::noop());
                    checkin(key.clone(), link, &mut cx);
                }
                None => break,
            }
            assert!(Instant::now() < deadline, "the server's close never reached the client");
            tokio::task::yield_now().await;
        }
    }
    assert_eq!(accepted.load(Ordering::SeqCst), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_request_line_carries_the_path_and_the_host_header_the_authority() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let head = tokio::spawn(async move {
        let (mut socket, _) = listener.accept().await.expect("accept");
        let mut seen = Vec::new();
        let mut buf = [0u8; 1024];
        while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
            let n = socket.read(&mut buf).await.expect("read");
            assert_ne!(n, 0, "the request ended early");
            seen.extend_from_slice(&buf[..n]);
        }
        socket.write_all(b"HTTP/1.1 204 No Content\r\n\r\n").await.expect("write");
        String::from_utf8(seen).expect("text")
    });
    let response = send(get(addr), None).await.expect("an answer");
    assert_eq!(response.status(), 204);
    let head = head.await.expect("server").to_ascii_lowercase();
    assert!(head.starts_with("get /path?q=1 http/1.1\r\n"), "{head}");
    assert!(head.contains(&format!("\r\nhost: {addr}\r\n")), "{head}");
}
