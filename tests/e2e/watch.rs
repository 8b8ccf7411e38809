//! `capsule watch` as a process: a TCP proxy between it and the door cuts its first connection
//! mid-stream; the watcher reconnects with `Last-Event-ID` and still prints every frame exactly
//! once, then exits 0 on `capsule-closed`.

use crate::common::*;
use capsule_actors::door;
use capsule_protocol::frame::Frame;
use capsule_stub::{Script, Stub, Turn};
use serde_json::Value;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};

/// Bytes of the door's answer the proxy lets through on the first connection before it closes
/// it (the HTTP head is ~150 bytes, each text frame ~100, the whole stream ~30 KB).
const CUT_AFTER: usize = 6_000;

/// A loopback TCP proxy to `upstream` that closes its first connection once `cut_after` bytes
/// of the answer have passed (forwarding exactly that many, so the cut usually falls inside a
/// frame) and passes later connections through untouched.
struct Proxy {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    cut: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    async fn start(upstream: SocketAddr, cut_after: usize) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("proxy binds");
        let addr = listener.local_addr().expect("proxy address");
        let connections = Arc::new(AtomicUsize::new(0));
        let cut = Arc::new(AtomicBool::new(false));
        let task = tokio::spawn({
            let (connections, cut) = (connections.clone(), cut.clone());
            async move {
                while let Ok((client, _)) = listener.accept().await {
                    let n = connections.fetch_add(1, Ordering::SeqCst) + 1;
                    let limit = (n == 1).then_some(cut_after);
                    tokio::spawn(pipe(client, upstream, limit, cut.clone()));
                }
            }
        });
        Proxy { addr, connections, cut, task }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn pipe(client: TcpStream, upstream: SocketAddr, limit: Option<usize>, cut: Arc<AtomicBool>) {
    let Ok(server) = TcpStream::connect(upstream).await else { return };
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let up = tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    let mut passed = 0usize;
    let mut buf = vec![0u8; 8192];
    loop {
        let n = match server_read.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let take = limit.map_or(n, |l| n.min(l - passed));
        if client_write.write_all(&buf[..take]).await.is_err() {
            break;
        }
        passed += take;
        if limit == Some(passed) {
            cut.store(true, Ordering::SeqCst);
            break;
        }
    }
    // Closing both directions: the watcher sees its connection end mid-stream, the door sees
    // its client gone.
    up.abort();
    drop(client_write);
    drop(server_read);
}

/// Poll `f` every 5 ms until it holds, or panic after `secs` seconds naming `what`.
async fn within(secs: u64, what: &str, mut f: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !f() {
        assert!(tokio::time::Instant::now() < deadline, "timed out after {secs} s waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_survives_a_dropped_connection_and_prints_every_frame_exactly_once() {
    let text: String = (0..300u32).map(|i| char::from(b'a' + u8::try_from(i % 26).expect("small"))).collect();
    // One frame per character, 2 ms apart, so the task is still streaming when the cut comes
    // and the reconnect gets both a replay and live frames. ~310 frames stay inside the ring.
    let turn = Turn { text: Some(text.clone()), event_interval_ms: Some(2), ..Default::default() };
    let stub = Stub::start(Script { chunk_chars: 1, ..Script::new(vec![turn]) }).expect("stub");
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let proxy = Proxy::start(d.addr, CUT_AFTER).await;

    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["watch", &proxy.url(), "--json"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("capsule watch starts");
    let lines = Arc::new(Mutex::new(Vec::<Value>::new()));
    let stdout = tokio::spawn({
        let lines = lines.clone();
        let out = child.stdout.take().expect("stdout");
        async move {
            let mut reader = BufReader::new(out).lines();
            while let Ok(Some(line)) = reader.next_line().await {
                let v: Value = serde_json::from_str(&line)
                    .unwrap_or_else(|e| panic!("watch printed a line that is not JSON ({e}): {line}"));
                lines.lock().expect("lines").push(v);
            }
        }
    });
    let stderr = tokio::spawn({
        let mut err = child.stderr.take().expect("stderr");
        async move {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s).await;
            s
        }
    });
    let printed = |pred: &dyn Fn(&Value) -> bool| lines.lock().expect("lines").iter().any(pred);
    within(30, "watch to print connection-ack", || printed(&|v| v["event"] == "connection-ack")).await;

    // What the session emitted, read in-process alongside, to compare with what watch printed.
    let mut rx = session.subscribe(None).await.expect("subscribe");
    let emitted = tokio::spawn(async move {
        let mut out = Vec::new();
        while let Some(f) = rx.recv().await {
            if matches!(f.frame, Frame::CapsuleClosed {}) {
                break;
            }
            out.push(f);
        }
        out
    });
    let outcome = session.submit("stream a long reply").await.expect("loop answers");
    assert_eq!(outcome.exit_status, capsule_protocol::trace::ExitStatus::Ok, "{outcome:?}");
    assert_eq!(outcome.message, text);

    within(30, "the proxy to cut the first connection", || proxy.cut.load(Ordering::SeqCst)).await;
    within(30, "watch to reconnect through the proxy", || proxy.connections.load(Ordering::SeqCst) >= 2).await;
    let final_status =
        |v: &Value| v["event"] == "status" && v["data"]["final"] == true && v["data"]["id"] == outcome.task_id.as_str();
    within(30, "watch to print the task's final status", || printed(&final_status)).await;

    session.shutdown().await;
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait())
        .await
        .expect("watch exits within 30 s of capsule-closed")
        .expect("wait");
    tokio::time::timeout(Duration::from_secs(10), stdout).await.expect("stdout closes").expect("stdout reader");
    let stderr =
        tokio::time::timeout(Duration::from_secs(10), stderr).await.expect("stderr closes").expect("stderr reader");
    assert!(status.success(), "watch exits 0 on capsule-closed: {status:?}; stderr: {stderr}");
    assert!(stderr.contains("reconnecting"), "watch says it reconnected: {stderr}");

    let lines = lines.lock().expect("lines").clone();
    let ids: Vec<u64> = lines.iter().filter_map(|v| v["id"].as_u64()).collect();
    let max = ids.iter().copied().max().expect("watch printed frames");
    assert_eq!(ids, (1..=max).collect::<Vec<_>>(), "every id from 1 to {max} once, in order, no gap, no duplicate");
    let events: Vec<&str> = lines.iter().map(|v| v["event"].as_str().unwrap_or("")).collect();
    assert_eq!(
        events.iter().filter(|e| **e == "connection-ack").count(),
        1,
        "ack on the first connection only: {events:?}"
    );
    assert_eq!(events.first(), Some(&"connection-ack"));
    assert_eq!(events.last(), Some(&"capsule-closed"));
    assert!(proxy.connections.load(Ordering::SeqCst) >= 2, "a reconnect happened");

    // Frame for frame what the session emitted (the in-process reader saw them all: the
    // stream is ~310 frames and it reads as they come).
    let emitted =
        tokio::time::timeout(Duration::from_secs(10), emitted).await.expect("emitted frames").expect("reader");
    let expected: Vec<Value> = emitted.iter().map(|f| f.to_json_line()).collect();
    let got: Vec<Value> = lines.iter().filter(|v| v["id"].is_u64()).cloned().collect();
    assert_eq!(got.len(), expected.len(), "as many frames as the session emitted");
    assert!(got == expected, "watch printed exactly the emitted frames");
}

/// A wrong URL (nothing listens there) fails at once with exit 2 and says what to check,
/// instead of retrying in silence.
#[test]
fn watch_on_a_url_where_nothing_listens_fails_at_once_saying_what_to_check() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("bind").local_addr().expect("addr").port();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["watch", &format!("http://127.0.0.1:{port}")])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("watch runs");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        // Its own retries would take about a minute; it must not get there.
        assert!(std::time::Instant::now() < deadline, "watch kept retrying a URL where nothing listens");
        std::thread::sleep(std::time::Duration::from_millis(10));
    };
    let mut stderr = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().expect("stderr"), &mut stderr).expect("read");
    assert_eq!(status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("cannot reach") && stderr.contains("is the capsule running"), "{stderr}");
    assert!(!stderr.contains("reconnecting"), "no retry on a first connection: {stderr}");
}

/// A door with `network.authentication: bearer`: `capsule watch` without the token exits 2
/// saying to pass `--token-file`; with `--token-file` it follows the frames to `capsule-closed`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_sends_the_door_token_from_its_file_and_says_so_when_it_is_missing() {
    let stub = Stub::start(Script::new(vec![Turn::text("watched")])).expect("stub");
    let cap = anthropic_capsule(&stub.url(), &[], "network: {authentication: bearer}\n");
    let session = Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let token_file = session.door_auth.as_ref().expect("auth on").token_file.clone().expect("minted here");

    let refused = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["watch", &d.url()])
        .output()
        .await
        .expect("watch runs");
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("requires a door token") && stderr.contains("--token-file"), "{stderr}");

    let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["watch", &d.url(), "--json", "--token-file"])
        .arg(&token_file)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("watch starts");
    // Wait until the watcher is subscribed (its ack frame), then run a task and close.
    let mut child = child;
    let mut out = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let first: Value = serde_json::from_str(&out.next_line().await.expect("read").expect("a line")).expect("json");
    assert_eq!(first["event"], "connection-ack", "{first}");
    let outcome = session.submit("go").await.expect("outcome");
    assert_eq!(outcome.message, "watched");
    session.shutdown().await;
    let mut events = Vec::new();
    while let Ok(Some(line)) = out.next_line().await {
        let v: Value = serde_json::from_str(&line).expect("json");
        events.push(v["event"].as_str().unwrap_or("").to_string());
    }
    let status = tokio::time::timeout(Duration::from_secs(30), child.wait()).await.expect("exits").expect("status");
    assert!(status.success(), "{events:?}");
    assert!(
        events.iter().any(|e| e == "text") && events.last().map(String::as_str) == Some("capsule-closed"),
        "{events:?}"
    );
}
