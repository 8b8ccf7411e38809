//! `event_interval_ms`: a turn's streamed events spread over time, the events themselves
//! unchanged.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use capsule_stub::{Script, Stub, Turn};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::client::post;

const STREAM: &str = r#"{"model":"m","stream":true}"#;

/// "abcd" in one-character pieces: message_start, ping, block start, four deltas, block stop,
/// message_delta, message_stop.
const EVENTS: usize = 10;

const PAUSE_MS: u64 = 40;

fn script(pause: Option<u64>) -> Script {
    let mut script = Script::new(vec![Turn { text: Some("abcd".into()), event_interval_ms: pause, ..Turn::default() }]);
    script.chunk_chars = 1;
    script
}

/// Sends a streaming request and returns when each read of the answer arrived, with its bytes.
async fn timed_reads(addr: SocketAddr) -> Vec<(Instant, Vec<u8>)> {
    let mut stream = TcpStream::connect(addr).await.expect("the stub accepts");
    let request = format!(
        "POST /v1/messages HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{STREAM}",
        STREAM.len()
    );
    stream.write_all(request.as_bytes()).await.expect("the request is sent");
    let mut reads = Vec::new();
    let mut buffer = [0u8; 4096];
    loop {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => break,
            Ok(n) => reads.push((Instant::now(), buffer[..n].to_vec())),
        }
    }
    reads
}

#[tokio::test]
async fn event_interval_ms_paces_the_events_without_changing_them() {
    let paced = Stub::start(script(Some(PAUSE_MS))).expect("starts");
    let plain = Stub::start(script(None)).expect("starts");

    let paced_reply = post(paced.addr(), "/v1/messages", STREAM).await;
    let plain_reply = post(plain.addr(), "/v1/messages", STREAM).await;

    assert!(paced_reply.complete, "a paced stream still ends properly");
    assert_eq!(paced_reply.events().len(), EVENTS);
    assert_eq!(paced_reply.events(), plain_reply.events(), "the same events");
    assert_eq!(paced_reply.chunks.len(), EVENTS, "still one chunk per event");
    let pauses = u128::try_from(EVENTS - 1).expect("small") * u128::from(PAUSE_MS) * 1_000_000;
    assert!(
        paced.requests()[0].stub_elapsed_ns >= pauses,
        "{} ns < {pauses} ns: one pause between each two of {EVENTS} events",
        paced.requests()[0].stub_elapsed_ns
    );
}

#[tokio::test]
async fn paced_events_leave_the_stub_one_at_a_time_not_all_at_the_end() {
    let stub = Stub::start(script(Some(PAUSE_MS))).expect("starts");

    let reads = timed_reads(stub.addr()).await;

    let text: String = reads.iter().map(|(_, bytes)| String::from_utf8_lossy(bytes).into_owned()).collect();
    assert!(text.contains("event: message_stop"), "{text}");
    let (first, last) = (reads[0].0, reads[reads.len() - 1].0);
    // The stub hands the events over (EVENTS - 1) × PAUSE_MS apart; half of that leaves room for
    // a late first read while still ruling out a body written in one go after a delay.
    let spread = Duration::from_millis(PAUSE_MS * u64::try_from(EVENTS - 1).expect("small") / 2);
    assert!(last - first >= spread, "the answer arrived within {:?}; expected at least {spread:?}", last - first);
}

#[tokio::test]
async fn each_streamed_event_records_when_it_was_handed_over() {
    let paced = Stub::start(script(Some(PAUSE_MS))).expect("starts");
    let whole = Stub::start(Script::new(vec![Turn::text("abcd")])).expect("starts");

    let reply = post(paced.addr(), "/v1/messages", STREAM).await;
    assert!(reply.complete);
    let _ = post(whole.addr(), "/v1/messages", r#"{"model":"m"}"#).await;

    let request = &paced.requests()[0];
    let sent = &request.event_sent_unix_ns;
    assert_eq!(sent.len(), EVENTS, "one instant per event");
    assert!(sent[0] >= request.received_unix_ns, "sent after the request arrived");
    let pause = u128::from(PAUSE_MS) * 1_000_000;
    assert!(
        sent.windows(2).all(|w| w[1] - w[0] >= pause),
        "events are handed over at least {PAUSE_MS} ms apart: {sent:?}"
    );
    assert!(
        whole.requests()[0].event_sent_unix_ns.is_empty(),
        "a non-streamed answer is one body, with no per-event instants"
    );
}
