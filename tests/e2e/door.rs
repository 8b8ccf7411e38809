//! The door over a real socket: JSON-RPC methods, SSE frames as bytes, replay, lifecycle, and
//! bad requests that get a clear error while the capsule keeps serving.

use crate::common::*;
use capsule_actors::door;
use capsule_stub::Turn;
use futures::StreamExt;
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

async fn serve(cap: &Capsule) -> (Arc<capsule_actors::Session>, door::Door) {
    let session = Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    (session, d)
}

async fn card(door: &str) -> Value {
    reqwest::get(format!("{door}/.well-known/agent-card.json")).await.expect("card").json().await.expect("json")
}

fn send_body(text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"messageId": "m1", "role": "user", "parts": [{"text": text}]}}})
}

async fn rpc(url: &str, body: Value) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(url)
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("request");
    let status = r.status().as_u16();
    (status, serde_json::from_slice(&r.bytes().await.expect("body")).expect("json"))
}

/// Read an SSE response until `stop` says so (or 30 s); returns the raw text.
async fn read_sse(resp: reqwest::Response, stop: impl Fn(&str) -> bool) -> String {
    let mut text = String::new();
    let mut stream = resp.bytes_stream();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !stop(&text) {
        match tokio::time::timeout_at(deadline, stream.next()).await.expect("SSE within 30 s") {
            Some(chunk) => text.push_str(&String::from_utf8_lossy(&chunk.expect("chunk"))),
            None => break,
        }
    }
    text
}

/// Parse raw SSE text into (id, event, data) triples, checking the exact line shape.
fn frames(raw: &str) -> Vec<(Option<u64>, String, Value)> {
    assert!(!raw.contains('\r'), "line ends are \\n only");
    raw.split("\n\n")
        .filter(|b| !b.trim().is_empty() && !b.starts_with(':'))
        .map(|block| {
            let lines: Vec<&str> = block.lines().collect();
            let (id, rest) = match lines[0].strip_prefix("id: ") {
                Some(n) => (Some(n.parse().expect("numeric id")), &lines[1..]),
                None => (None, &lines[..]),
            };
            assert_eq!(rest.len(), 2, "event + one data line: {block}");
            let event = rest[0].strip_prefix("event: ").expect("event line").to_string();
            let data = serde_json::from_str(rest[1].strip_prefix("data: ").expect("data line"))
                .expect("data is one-line JSON");
            (id, event, data)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_card_names_the_capsule() {
    let stub = stub(vec![]);
    let (_s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let card: Value = card(&d.url()).await;
    assert_eq!(card["name"], "test-capsule");
    assert_eq!(card["capabilities"]["streaming"], true);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_send_answers_the_completed_task() {
    let stub = stub(vec![Turn::text("hello there")]);
    let (_s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let (status, v) = rpc(&d.url(), send_body("hi")).await;
    assert_eq!(status, 200);
    assert_eq!(v["result"]["status"]["state"], "completed");
    assert_eq!(v["result"]["status"]["response"], "hello there");
    let id = v["result"]["id"].as_str().expect("id");
    assert!(id.starts_with("tsk_"));
    assert!(v["result"]["context_id"].as_str().expect("ctx").starts_with("ctx_"));
    let (_, got) = rpc(&d.url(), json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": id}})).await;
    assert_eq!(got["result"]["status"]["state"], "completed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn message_stream_writes_the_task_frames_in_order_ending_with_one_final_status() {
    let stub = stub(vec![Turn::text("streamed reply")]);
    let (_s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let mut body = send_body("hi");
    body["method"] = json!("message/stream");
    let resp = reqwest::Client::new()
        .post(d.url())
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    assert_eq!(resp.headers()["content-type"], "text/event-stream");
    let raw = read_sse(resp, |_| false).await;
    let fs = frames(&raw);
    let events: Vec<&str> = fs.iter().map(|f| f.1.as_str()).collect();
    assert_eq!(events.first(), Some(&"status"));
    assert_eq!(fs[0].2["status"]["state"], "working");
    assert_eq!(fs[0].2["status"]["message"], "inference turn 1");
    let text: String = fs.iter().filter(|f| f.1 == "text").map(|f| f.2["text"].as_str().unwrap_or("")).collect();
    assert_eq!(text, "streamed reply");
    let last_text = fs.iter().rposition(|f| f.1 == "text").expect("text");
    assert_eq!(fs[last_text].2["final"], true);
    assert_eq!(fs[last_text].2["text"], "");
    let last = fs.last().expect("frames");
    assert_eq!(
        (last.1.as_str(), &last.2["final"], &last.2["status"]["state"]),
        ("status", &json!(true), &json!("completed"))
    );
    assert_eq!(fs.iter().filter(|f| f.2["final"] == true && f.1 == "status").count(), 1);
    let ids: Vec<u64> = fs.iter().filter_map(|f| f.0).collect();
    assert_eq!(ids.first(), Some(&1), "ids start at 1");
    assert!(ids.windows(2).all(|w| w[1] == w[0] + 1), "ids strictly increase: {ids:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stream_watch_acks_first_and_replays_after_last_event_id() {
    let stub = stub(vec![Turn::text("abcdefghijklmnop")]);
    let (_s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let (_, v) = rpc(&d.url(), send_body("go")).await;
    assert_eq!(v["result"]["status"]["state"], "completed");
    let watch = |last: Option<&str>| {
        let mut r = reqwest::Client::new().post(d.url()).header("content-type", "application/json");
        if let Some(l) = last {
            r = r.header("last-event-id", l);
        }
        r.body(json!({"jsonrpc": "2.0", "id": 9, "method": "stream/watch"}).to_string()).send()
    };
    let all = frames(
        &read_sse(watch(Some("0")).await.expect("watch"), |t| {
            t.contains("\"final\":true,\"id\":\"tsk_") && t.contains("completed")
        })
        .await,
    );
    assert_eq!(all[0].1, "connection-ack");
    assert_eq!(all[0].2, json!({"role": "observer", "conversation_mode": "single"}));
    let max = all.iter().filter_map(|f| f.0).max().expect("replayed frames");
    let after =
        frames(&read_sse(watch(Some("3")).await.expect("watch"), |t| t.contains(&format!("id: {max}\n"))).await);
    let ids: Vec<u64> = after.iter().filter_map(|f| f.0).collect();
    assert_eq!(ids, (4..=max).collect::<Vec<_>>(), "exactly the frames after 3");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_past_the_ring_writes_a_gap_first() {
    let long = "x".repeat(700);
    let stub = capsule_stub::Stub::start(capsule_stub::Script {
        chunk_chars: 1,
        ..capsule_stub::Script::new(vec![Turn::text(long)])
    })
    .expect("stub");
    let (_s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let (_, v) = rpc(&d.url(), send_body("go")).await;
    assert_eq!(v["result"]["status"]["state"], "completed");
    let resp = reqwest::Client::new()
        .post(d.url())
        .header("content-type", "application/json")
        .header("last-event-id", "1")
        .body(json!({"jsonrpc": "2.0", "id": 9, "method": "stream/watch"}).to_string())
        .send()
        .await
        .expect("watch");
    let fs = frames(&read_sse(resp, |t| t.contains("\"completed\"")).await);
    assert_eq!(fs[0].1, "connection-ack");
    assert_eq!(fs[1].1, "gap");
    let first = fs[1].2["first_available_id"].as_u64().expect("id");
    assert!(first > 2, "frames 2..{first} were evicted");
    assert_eq!(fs[2].0, Some(first), "replay resumes at the first available id");
    assert_eq!(fs.iter().filter(|f| f.0.is_some()).count(), 512, "the ring holds 512 frames");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_get_json_rpc_errors_and_the_capsule_keeps_serving() {
    let stub = stub(vec![Turn::text("still here")]);
    let (_s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let c = reqwest::Client::new();
    let r = c.post(d.url()).body("{}").send().await.expect("post");
    assert_eq!(r.status().as_u16(), 415);
    let v: Value = r.json().await.expect("json");
    assert_eq!(v["error"]["code"], -32600);
    let r = c.post(d.url()).header("content-type", "application/json").body("{not json").send().await.expect("post");
    assert_eq!(r.json::<Value>().await.expect("json")["error"]["code"], -32700);
    let r = c.post(d.url()).header("content-type", "application/json").send().await.expect("post");
    assert_eq!(r.json::<Value>().await.expect("json")["error"]["code"], -32700, "an empty body");
    let (_, v) = rpc(&d.url(), json!({"jsonrpc": "2.0", "id": 1, "method": "no/such"})).await;
    assert_eq!(v["error"]["code"], -32601);
    let (_, v) = rpc(&d.url(), json!({"jsonrpc": "1.0", "id": 1, "method": "message/send"})).await;
    assert_eq!(v["error"]["code"], -32600);
    let (_, v) = rpc(
        &d.url(),
        json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"parts": []}}}),
    )
    .await;
    assert_eq!(v["error"]["code"], -32602, "a message with no text");
    let (_, v) =
        rpc(&d.url(), json!({"jsonrpc": "2.0", "id": 1, "method": "tasks/get", "params": {"id": "tsk_nope"}})).await;
    assert_eq!(v["error"]["code"], -32001);
    let resp = c
        .post(d.url())
        .header("content-type", "application/json")
        .header("last-event-id", "abc")
        .body(json!({"jsonrpc": "2.0", "id": 9, "method": "stream/watch"}).to_string())
        .send()
        .await
        .expect("watch");
    let fs = frames(&read_sse(resp, |_| false).await);
    assert_eq!(fs.len(), 1);
    assert_eq!(fs[0].1, "error");
    assert!(fs[0].2["error"].as_str().expect("message").contains("Last-Event-ID"));
    let (_, v) = rpc(&d.url(), send_body("after all that")).await;
    assert_eq!(v["result"]["status"]["response"], "still here");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_busy_single_capsule_rejects_and_a_queue_capsule_queues_up_to_its_depth() {
    let slow = || Turn { text: Some("slow".into()), delay_ms: Some(400), ..Default::default() };
    let stub1 = stub(vec![slow()]);
    let (s, d) = serve(&anthropic_capsule(&stub1.url(), &[], "")).await;
    let first = tokio::spawn({
        let url = d.url();
        async move { rpc(&url, send_body("one")).await }
    });
    eventually("the first task to be running", || async { !stub1.requests().is_empty() }).await;
    let (_, v) = rpc(&d.url(), send_body("two")).await;
    assert_eq!(v["result"]["status"]["state"], "rejected");
    assert_eq!(first.await.expect("join").1["result"]["status"]["state"], "completed");
    drop(s);

    let stub2 = stub(vec![slow(), Turn::text("second")]);
    let (s2, d2) =
        serve(&anthropic_capsule(&stub2.url(), &[], "lifecycle: {task_acceptance: queue, queue_depth: 1}\n")).await;
    let mut rx = s2.subscribe(None).await.expect("subscribe");
    let url = d2.url();
    let a = tokio::spawn({
        let url = url.clone();
        async move { rpc(&url, send_body("a")).await }
    });
    eventually("task a running", || async { !stub2.requests().is_empty() }).await;
    let b = tokio::spawn({
        let url = url.clone();
        async move { rpc(&url, send_body("b")).await }
    });
    loop {
        let f = tokio::time::timeout(Duration::from_secs(30), rx.recv()).await.expect("frames").expect("open");
        if let capsule_protocol::frame::Frame::Status { status, .. } = &f.frame
            && status.message.starts_with("queued")
        {
            break;
        }
    }
    let (_, c) = rpc(&url, send_body("c")).await;
    assert_eq!(c["result"]["status"]["state"], "rejected", "the queue holds one");
    assert!(c["result"]["status"]["message"].as_str().unwrap_or("").contains("queue"), "{c}");
    assert_eq!(a.await.expect("a").1["result"]["status"]["response"], "slow");
    assert_eq!(b.await.expect("b").1["result"]["status"]["response"], "second");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tasks_cancel_ends_a_running_task_canceled_with_one_final_status() {
    let stub = stub(vec![Turn { text: Some("never seen".into()), delay_ms: Some(3_000), ..Default::default() }]);
    let (s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let mut rx = s.subscribe(None).await.expect("subscribe");
    let send = tokio::spawn({
        let url = d.url();
        async move { rpc(&url, send_body("wait")).await }
    });
    eventually("the task to be running", || async { !stub.requests().is_empty() }).await;
    let id = loop {
        let f = rx.recv().await.expect("frame");
        if let capsule_protocol::frame::Frame::Status { id, .. } = &f.frame {
            break id.clone();
        }
    };
    let (_, v) =
        rpc(&d.url(), json!({"jsonrpc": "2.0", "id": 3, "method": "tasks/cancel", "params": {"id": id}})).await;
    assert_eq!(v["result"]["status"]["state"], "canceled");
    assert_eq!(send.await.expect("join").1["result"]["status"]["state"], "canceled");
    let rest = frames_until_final(&mut rx, &id).await;
    let finals = rest
        .iter()
        .filter(|f| matches!(&f.frame, capsule_protocol::frame::Frame::Status { is_final: true, .. }))
        .count();
    assert_eq!(finals, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_that_never_reads_does_not_stall_the_task_or_other_clients() {
    let paced = Turn { event_interval_ms: Some(1), ..Turn::text("z".repeat(1000)) };
    let stub =
        capsule_stub::Stub::start(capsule_stub::Script { chunk_chars: 1, ..capsule_stub::Script::new(vec![paced]) })
            .expect("stub");
    let (_s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let watch = || {
        reqwest::Client::new()
            .post(d.url())
            .header("content-type", "application/json")
            .body(json!({"jsonrpc": "2.0", "id": 9, "method": "stream/watch"}).to_string())
            .send()
    };
    let _stuck = watch().await.expect("a watcher that never reads its body");
    let reader = watch().await.expect("a reading watcher");
    let (_, v) = rpc(&d.url(), send_body("go")).await;
    assert_eq!(v["result"]["status"]["state"], "completed", "the task finished despite the stuck client");
    let fs = frames(&read_sse(reader, |t| t.contains("\"completed\"")).await);
    let texts = fs.iter().filter(|f| f.1 == "text" && f.2["final"] == false).count() as u64;
    let missed: u64 = fs.iter().filter(|f| f.1 == "lagged").map(|f| f.2["missed"].as_u64().unwrap_or(0)).sum();
    // The reader keeps up with a paced stream, so it normally misses nothing; on a starved
    // machine it may fall behind its own queue, and then every frame it lost is counted.
    assert_eq!(texts + missed, 1000, "every frame was delivered or counted as missed ({texts} + {missed})");
    assert!(texts >= 500, "the reading client was not stalled by the stuck one ({texts} delivered)");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thinking_frames_reach_the_client_as_sse() {
    let t = Turn {
        thinking: Some(capsule_stub::Thinking { text: "pondering".into(), signature: "s".into() }),
        ..Turn::text("answer")
    };
    let stub = stub(vec![t]);
    let (_s, d) = serve(&anthropic_capsule(&stub.url(), &[], "")).await;
    let mut body = send_body("hi");
    body["method"] = json!("message/stream");
    let resp = reqwest::Client::new()
        .post(d.url())
        .header("content-type", "application/json")
        .body(body.to_string())
        .send()
        .await
        .expect("post");
    let fs = frames(&read_sse(resp, |_| false).await);
    let thinking: String = fs
        .iter()
        .filter(|f| f.1 == "thinking")
        .map(|f| {
            assert_eq!(f.2["final"], false);
            f.2["text"].as_str().unwrap_or("").to_string()
        })
        .collect();
    assert_eq!(thinking, "pondering");
    let first_thinking = fs.iter().position(|f| f.1 == "thinking").expect("thinking");
    let first_text = fs.iter().position(|f| f.1 == "text").expect("text");
    assert!(first_thinking < first_text);
}

/// `network.authentication: bearer`: every JSON-RPC request, streams included, needs the
/// session's door token. A missing or wrong token is a 401 with `WWW-Authenticate: Bearer`
/// before anything runs or any stream starts; the card stays public and declares the scheme;
/// the token is in a `0600` file and in no trace, frame or log line.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_door_with_bearer_authentication_refuses_every_request_without_its_token() {
    let stub = stub(vec![Turn::text("authorized")]);
    let cap = anthropic_capsule(&stub.url(), &[], "network: {authentication: bearer}\n");
    let (s, d) = serve(&cap).await;
    let auth = s.door_auth.as_ref().expect("authentication on");
    let token = std::fs::read_to_string(auth.token_file.as_ref().expect("minted here")).expect("token file");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode =
            std::fs::metadata(auth.token_file.as_ref().expect("minted here")).expect("meta").permissions().mode()
                & 0o777;
        assert_eq!(mode, 0o600);
    }
    let client = reqwest::Client::new();
    let post = |body: Value, bearer: Option<&str>, accept_sse: bool| {
        let mut r = client.post(d.url()).header("content-type", "application/json").body(body.to_string());
        if let Some(t) = bearer {
            r = r.bearer_auth(t);
        }
        if accept_sse {
            r = r.header("accept", "text/event-stream");
        }
        r.send()
    };
    let stream = json!({"jsonrpc": "2.0", "id": 1, "method": "message/stream", "params": {"message": {"messageId": "m", "role": "user", "parts": [{"text": "hi"}]}}});
    let watch = json!({"jsonrpc": "2.0", "id": 1, "method": "stream/watch"});
    for (what, body, bearer) in [
        ("send without a token", send_body("hi"), None),
        ("send with a wrong token", send_body("hi"), Some("not-the-token")),
        ("stream without a token", stream.clone(), None),
        ("watch with a wrong token", watch.clone(), Some("x")),
    ] {
        let resp = post(body, bearer, true).await.expect("answer");
        assert_eq!(resp.status().as_u16(), 401, "{what}");
        assert_eq!(resp.headers()["www-authenticate"], "Bearer", "{what}");
        assert_eq!(resp.headers()["connection"], "close", "{what}: the unread body ends the connection, and says so");
        assert!(!resp.headers()["content-type"].to_str().unwrap_or("").contains("event-stream"), "{what}: no stream");
        let v: Value = resp.json().await.expect("json");
        assert_eq!(v["error"]["code"], -32010, "{what}: {v}");
    }
    assert!(stub.requests().is_empty(), "nothing ran for a refused request");
    let card: Value = card(&d.url()).await;
    assert_eq!(card["securitySchemes"]["bearer"], json!({"type": "http", "scheme": "bearer"}), "{card}");

    let ok: Value = post(send_body("hi"), Some(token.trim()), false).await.expect("answer").json().await.expect("json");
    assert_eq!(ok["result"]["status"]["response"], "authorized", "{ok}");
    let dir = s.dir.clone();
    s.shutdown().await;
    for file in ["trace.jsonl", "frames.jsonl", "conversation.jsonl"] {
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        assert!(!text.contains(token.trim()), "the token is not in {file}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_authentication_the_door_mints_no_token_and_the_card_declares_no_scheme() {
    let stub = stub(vec![]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let (s, d) = serve(&cap).await;
    assert!(s.door_auth.is_none());
    assert!(!s.dir.join(capsule_actors::session::DOOR_TOKEN_FILE).exists());
    let card: Value = card(&d.url()).await;
    assert!(card.get("securitySchemes").is_none(), "{card}");
}
