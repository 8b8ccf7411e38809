//! The cluster's storage and ownership primitives on a real 3-node NATS JetStream cluster
//! (R3): journal records as subjects with fenced appends, leases in a KV bucket, a broker
//! lost mid-run, an entry in an unknown format, NATS unreachable at start, a host's connection
//! to the journal stream's leader, and the frames writer storing the frames waiting together in
//! one entry.

use crate::nats::NatsCluster;
use capsule_actors::cluster::{self, ClusterError, Leases, Record, StreamLog};
use std::time::Duration;

async fn jetstream(c: &NatsCluster) -> async_nats::jetstream::Context {
    let client = cluster::connect(&c.urls()).await.expect("connects");
    let js = async_nats::jetstream::new(client);
    cluster::ensure_journal(&js, 3).await.expect("the R3 journal stream");
    js
}

fn line(n: u32) -> Vec<u8> {
    serde_json::to_vec(&serde_json::json!({"n": n})).expect("json")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn appends_are_acknowledged_in_order_a_replaced_owner_is_fenced_and_a_foreign_entry_refused() {
    let c = NatsCluster::start(3).await;
    let js = jetstream(&c).await;
    let (mut a, before) = StreamLog::open(&js, "ses_one", Record::Conversation).await.expect("open");
    assert!(before.is_empty() && a.last() == 0);
    let mut seqs = Vec::new();
    for n in 1..=3 {
        seqs.push(a.append(line(n)).await.expect("acknowledged"));
    }
    assert!(seqs.windows(2).all(|w| w[1] > w[0]), "{seqs:?}");
    // Another record of the same session, and another session, do not disturb the order.
    let (mut other, _) = StreamLog::open(&js, "ses_two", Record::Conversation).await.expect("open");
    other.append(line(100)).await.expect("other session");
    // A new owner opens the record: it reads every entry in order and appends after them.
    let (mut b, read) = StreamLog::open(&js, "ses_one", Record::Conversation).await.expect("reopen");
    assert_eq!(read, vec![line(1), line(2), line(3)]);
    assert_eq!(b.last(), seqs[2]);
    b.append(line(4)).await.expect("the new owner appends");
    // The old owner's next append names a last entry that is no longer last: refused.
    let e = a.append(line(99)).await.expect_err("fenced");
    assert!(matches!(e, ClusterError::Fenced { .. }), "{e}");
    assert_eq!(e.code().as_str(), "E-CLU-003");
    let (_, after) = StreamLog::open(&js, "ses_one", Record::Conversation).await.expect("reopen");
    assert_eq!(after, vec![line(1), line(2), line(3), line(4)], "nothing from the fenced owner");
    // An entry that is not a journal line: a coded refusal naming it, never a panic.
    let subject = cluster::subject("ses_bad", Record::Trace).expect("subject");
    js.publish(subject.clone(), "not json at all".into()).await.expect("publish").await.expect("stored");
    let e = StreamLog::open(&js, "ses_bad", Record::Trace).await.expect_err("refused");
    assert_eq!(e.code().as_str(), "E-CLU-004", "{e}");
    assert!(e.to_string().contains(&subject), "{e}");
    let e = cluster::subject("ses.with.dots", Record::Trace).expect_err("not a subject token");
    assert_eq!(e.code().as_str(), "E-CLU-004");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_one_of_three_brokers_killed_appends_go_on() {
    let mut c = NatsCluster::start(3).await;
    let js = jetstream(&c).await;
    let (mut log, _) = StreamLog::open(&js, "ses_broker", Record::Trace).await.expect("open");
    log.append(line(1)).await.expect("before");
    c.kill(0);
    // The client moves to a live server; JetStream keeps a quorum of two. Appends may fail
    // while a new stream leader is elected: retried until one is acknowledged.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(20);
    for n in 2..=4 {
        loop {
            match log.append(line(n)).await {
                Ok(_) => break,
                Err(ClusterError::JetStream { .. }) if tokio::time::Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(e) => panic!("append {n} after the broker loss: {e}"),
            }
        }
    }
    let (_, all) = StreamLog::open(&js, "ses_broker", Record::Trace).await.expect("read");
    assert_eq!(all, vec![line(1), line(2), line(3), line(4)], "in order, none lost, none twice");
    // The node comes back with its store and catches up; the record goes on after it.
    c.restart(0).await;
    log.append(line(5)).await.expect("after the node rejoined");
    let (_, all) = StreamLog::open(&js, "ses_broker", Record::Trace).await.expect("read");
    assert_eq!(all.len(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exactly_one_host_takes_a_session_and_loses_it_when_it_stops_renewing() {
    let c = NatsCluster::start(3).await;
    let client = cluster::connect(&c.urls()).await.expect("connects");
    let js = async_nats::jetstream::new(client);
    let leases = Leases::open(&js, 3, Duration::from_secs(1)).await.expect("bucket");
    // Three hosts ask at once: one wins, the others are told who holds it.
    let (a, b, h) = tokio::join!(
        leases.acquire("ses_x", "host-a"),
        leases.acquire("ses_x", "host-b"),
        leases.acquire("ses_x", "host-c")
    );
    let results = [a, b, h];
    let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    let winner = winners[0].record().clone();
    for r in results.iter().filter_map(|r| r.as_ref().err()) {
        assert_eq!(r.code().as_str(), "E-CLU-005");
        assert!(r.to_string().contains(&winner.host), "{r}");
    }
    let mut held = results.into_iter().find_map(Result::ok).expect("the winner");
    for _ in 0..3 {
        held.renew().await.expect("renewed within the TTL");
    }
    assert_eq!(leases.holder("ses_x").await.expect("read"), Some(winner.clone()));
    // It stops renewing: after the TTL another host's create wins, with a higher epoch.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    let taken = loop {
        match leases.acquire("ses_x", "host-d").await {
            Ok(l) => break l,
            Err(ClusterError::Held { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the lease never expired: {e}"),
        }
    };
    assert!(taken.record().epoch > winner.epoch, "{:?} after {winner:?}", taken.record());
    let e = held.renew().await.expect_err("the old owner lost it");
    assert_eq!(e.code().as_str(), "E-CLU-006", "{e}");
    // A lease value that is not ours is a coded refusal.
    let kv = js.get_key_value("CAPSULE_LEASES").await.expect("bucket");
    kv.put("ses_y", "garbage".into()).await.expect("put");
    assert_eq!(leases.holder("ses_y").await.expect_err("refused").code().as_str(), "E-CLU-004");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kv_entry_in_another_format_is_a_coded_refusal_and_a_listing_leaves_it_out() {
    let c = NatsCluster::start(3).await;
    let js = jetstream(&c).await;
    let put = |bucket: &'static str, key: &'static str, value: &'static str| {
        let js = js.clone();
        async move {
            let kv = js.get_key_value(bucket).await.expect("bucket");
            kv.put(key, value.into()).await.expect("put");
        }
    };
    // The session book: reading the entry is refused with its code; a listing leaves it out
    // and keeps the good ones.
    let sessions = cluster::Sessions::open(&js, 3).await.expect("book");
    let good = cluster::SessionEntry {
        capsule: "c".into(),
        spec: "abc".into(),
        host: "h0".into(),
        door: Some("http://127.0.0.1:1/".into()),
        door_key: None,
        control_key: None,
    };
    sessions.put("ses_good", &good).await.expect("booked");
    put(cluster::SESSIONS_BUCKET, "ses_bad", "{\"not\": \"a session\"}").await;
    let e = sessions.get(&js, "ses_bad").await.expect_err("refused");
    assert_eq!(e.code().as_str(), "E-CLU-004", "{e}");
    assert!(e.to_string().contains("ses_bad"), "{e}");
    let listed: Vec<String> = sessions.list().await.expect("listed").into_iter().map(|(k, _, _)| k).collect();
    assert_eq!(listed, vec!["ses_good".to_string()]);
    // The cluster's day totals: a coded refusal, so admission refuses rather than guesses.
    let spend = cluster::ClusterSpend::open(&js, 3).await.expect("spend bucket");
    put(cluster::SPEND_BUCKET, "day-2026-12-02", "12").await;
    let e = spend.totals("2026-12-02").await.expect_err("refused");
    assert_eq!(e.code().as_str(), "E-CLU-004", "{e}");
    let e = spend.reserve("2026-12-02", "r1", 10, 1000).await.expect_err("refused, not granted");
    assert_eq!(e.code().as_str(), "E-CLU-004", "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_unreachable_at_start_is_a_coded_error_naming_the_url() {
    let port = std::net::TcpListener::bind("127.0.0.1:0").expect("port").local_addr().expect("addr").port();
    let url = format!("nats://127.0.0.1:{port}");
    let e = cluster::connect(std::slice::from_ref(&url)).await.expect_err("nobody listens");
    assert_eq!(e.code().as_str(), "E-CLU-001");
    assert!(e.to_string().contains(&url), "{e}");
    assert_eq!(cluster::split_urls(" nats://a:1,,nats://b:2 "), vec!["nats://a:1", "nats://b:2"]);
}

/// The name of the server each of `urls` reaches.
async fn server_names(urls: &[String]) -> Vec<String> {
    let mut names = Vec::new();
    for url in urls {
        let client = cluster::connect(std::slice::from_ref(url)).await.expect("connects");
        names.push(client.server_info().server_name);
    }
    names
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_connects_to_the_journal_streams_leader_when_its_urls_name_it() {
    let c = NatsCluster::start(3).await;
    let urls = c.urls();
    let js = jetstream(&c).await;
    let mut stream = js.get_stream(cluster::JOURNAL_STREAM).await.expect("stream");
    let leader = stream.info().await.expect("info").cluster.clone().and_then(|c| c.leader).expect("an R3 leader");
    let names = server_names(&urls).await;
    let at = names.iter().position(|n| *n == leader).expect("the leader is one of the three servers");
    let follower = &urls[(at + 1) % urls.len()];
    // A connection to a follower moves to the leader, and appends through it.
    let client = cluster::connect(std::slice::from_ref(follower)).await.expect("connects");
    assert_ne!(client.server_info().server_name, leader);
    let near = cluster::near_journal_leader(client, &urls).await;
    assert_eq!(near.server_info().server_name, leader, "moved to the journal stream's leader");
    let (mut log, _) =
        StreamLog::open(&async_nats::jetstream::new(near), "ses_near", Record::Trace).await.expect("open");
    log.append(line(1)).await.expect("acknowledged through the leader");
    // When the list does not name the leader, the connection is kept.
    let others: Vec<String> = urls.iter().enumerate().filter(|(i, _)| *i != at).map(|(_, u)| u.clone()).collect();
    let client = cluster::connect(std::slice::from_ref(follower)).await.expect("connects");
    let kept = cluster::near_journal_leader(client, &others).await;
    assert_eq!(kept.server_info().server_name, names[(at + 1) % urls.len()], "kept on the follower");
    // A host started with every URL is on the leader (`capsule host --cluster`).
    let host = cluster::ClusterHost::start(&urls, "h-near", 3, Duration::from_secs(3)).await.expect("joins");
    assert_eq!(host.js.client().server_info().server_name, leader);
}

/// Stands in for the emitter: hands on every frame the writer says it stored.
struct Collect;

impl ractor::Actor for Collect {
    type Msg = capsule_actors::emitter::EmitterMsg;
    type State = tokio::sync::mpsc::UnboundedSender<capsule_protocol::frame::SharedFrame>;
    type Arguments = Self::State;

    async fn pre_start(
        &self,
        _me: ractor::ActorRef<Self::Msg>,
        tx: Self::State,
    ) -> Result<Self::State, ractor::ActorProcessingErr> {
        Ok(tx)
    }

    async fn handle(
        &self,
        _me: ractor::ActorRef<Self::Msg>,
        msg: Self::Msg,
        tx: &mut Self::State,
    ) -> Result<(), ractor::ActorProcessingErr> {
        if let capsule_actors::emitter::EmitterMsg::Stored(n) = msg {
            let _ = tx.send(n);
        }
        Ok(())
    }
}

// One runtime thread: the five frames are all waiting before the writer first runs.
#[tokio::test(flavor = "current_thread")]
async fn frames_waiting_together_are_stored_in_one_entry_and_read_back_in_order() {
    use capsule_actors::cluster::frames::{Pending, frames_of, writer};
    use capsule_protocol::frame::{Frame, NumberedFrame, Published};
    let c = NatsCluster::start(3).await;
    let js = jetstream(&c).await;
    let (log, _) = StreamLog::open(&js, "ses_batch", Record::Frames).await.expect("open");
    let (tx, mut stored) = tokio::sync::mpsc::unbounded_channel();
    let (sink, _) = ractor::Actor::spawn(None, Collect, tx).await.expect("sink");
    let frames = writer(log, sink);
    let text = |id: u64| {
        Published::new(NumberedFrame {
            id: Some(id),
            frame: Frame::Text { id: "tsk_1".into(), text: format!("chunk {id}"), is_final: false },
        })
    };
    for id in 1..=5 {
        frames.send(Pending::Frame(text(id))).expect("writer runs");
    }
    // A frame without an id passes through in its place, stored nowhere.
    frames.send(Pending::Frame(Published::unnumbered(Frame::CapsuleClosed {}))).expect("writer runs");
    let mut handed = Vec::new();
    while handed.len() < 6 {
        handed.push(
            tokio::time::timeout(Duration::from_secs(20), stored.recv()).await.expect("stored").expect("open").id,
        );
    }
    assert_eq!(handed, vec![Some(1), Some(2), Some(3), Some(4), Some(5), None], "handed back in order once stored");
    frames.send(Pending::Frame(text(6))).expect("writer runs");
    let six = tokio::time::timeout(Duration::from_secs(20), stored.recv()).await.expect("stored").expect("open");
    assert_eq!(six.id, Some(6));

    let (_, entries) = StreamLog::open(&js, "ses_batch", Record::Frames).await.expect("read");
    let stored = stored_entries(&js, "ses_batch", Record::Frames).await;
    assert_eq!(stored.len(), 2, "one entry for the five waiting together, one for the sixth");
    assert_eq!(stored[0]["batch"].as_array().map(Vec::len), Some(5), "{}", stored[0]);
    assert_eq!(stored[1]["id"], 6, "a lone frame is stored as a frame line: {}", stored[1]);
    // Opening the record gives the frames one by one, in order.
    let ids: Vec<Option<u64>> = entries.iter().flat_map(|e| frames_of(e).expect("frames")).map(|f| f.id).collect();
    assert_eq!(ids, (1..=6).map(Some).collect::<Vec<_>>());
    let texts: Vec<String> = entries
        .iter()
        .flat_map(|e| frames_of(e).expect("frames"))
        .map(|f| match f.frame {
            Frame::Text { text, .. } => text,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(texts[4], "chunk 5");
    // A batch holding something else, or an entry that is not an object, is not read as frames.
    assert!(frames_of(br#"{"batch": [{"id": 1, "event": "no-such-event", "data": {}}]}"#).is_none());
    assert!(frames_of(br#"{"batch": [1]}"#).is_none());
    assert!(frames_of(b"[1]").is_none());
}

/// The raw entries of a record, as stored (batches not expanded).
async fn stored_entries(js: &async_nats::jetstream::Context, session: &str, record: Record) -> Vec<serde_json::Value> {
    let subject = cluster::subject(session, record).expect("subject");
    let stream = js.get_stream(cluster::JOURNAL_STREAM).await.expect("stream");
    let (mut out, mut next) = (Vec::new(), 1);
    while let Ok(m) = stream.get_first_raw_message_by_subject(&subject, next).await {
        out.push(serde_json::from_slice(&m.payload).expect("json"));
        next = m.sequence + 1;
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_appended_together_are_one_entry_and_read_back_one_by_one() {
    let c = NatsCluster::start(3).await;
    let js = jetstream(&c).await;
    let (mut log, _) = StreamLog::open(&js, "ses_together", Record::Trace).await.expect("open");
    log.append_all(vec![line(1), line(2), line(3)]).await.expect("one step");
    log.append_all(vec![line(4)]).await.expect("a lone line");
    assert_eq!(log.append_all(Vec::new()).await.expect("nothing"), log.last(), "nothing to append: no entry");
    let stored = stored_entries(&js, "ses_together", Record::Trace).await;
    assert_eq!(stored.len(), 2, "{stored:?}");
    assert_eq!(stored[1], serde_json::json!({"n": 4}), "a lone object is stored as itself");
    let (_, all) = StreamLog::open(&js, "ses_together", Record::Trace).await.expect("read");
    assert_eq!(all, vec![line(1), line(2), line(3), line(4)], "in order, one by one");
    // A batch holding something other than objects is an entry in an unknown format.
    let (mut bad, _) = StreamLog::open(&js, "ses_badbatch", Record::Trace).await.expect("open");
    bad.append(br#"{"batch": [{"n": 1}, 2]}"#.to_vec()).await.expect("stored as given");
    let e = StreamLog::open(&js, "ses_badbatch", Record::Trace).await.expect_err("refused");
    assert!(matches!(e, ClusterError::BadEntry { .. }) && e.to_string().contains("in a batch"), "{e}");
    // An object with more keys than `batch` is a record of its own, not a batch.
    let (mut other, _) = StreamLog::open(&js, "ses_notbatch", Record::Trace).await.expect("open");
    other.append(br#"{"batch": [1], "event_type": "x"}"#.to_vec()).await.expect("stored");
    let (_, read) = StreamLog::open(&js, "ses_notbatch", Record::Trace).await.expect("read");
    assert_eq!(read.len(), 1);
}
