//! A session run in a cluster: its lease taken at launch and kept by its keeper, its
//! conversation and trace journaled to JetStream (each step acknowledged before it is acted
//! on), and the whole session stopped as soon as another host holds its lease.

use crate::cluster_support::{StoredEntry, stored_entries};
use crate::common::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster::{self, ClusterHost, Record, StreamLog};
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;
use serde_json::{Value, json};
use std::time::Duration;

async fn host(c: &NatsCluster, name: &str) -> ClusterHost {
    let client = cluster::connect(&c.urls()).await.expect("connects");
    ClusterHost::join(async_nats::jetstream::new(client), name, 3, Duration::from_secs(1)).await.expect("joins")
}

fn kinds(entries: &[Vec<u8>]) -> Vec<String> {
    entries
        .iter()
        .map(|e| serde_json::from_slice::<Value>(e).expect("json"))
        .map(|v| v["event_type"].as_str().or(v["role"].as_str()).unwrap_or("?").to_string())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clustered_session_journals_to_jetstream_and_stops_once_another_host_holds_its_lease() {
    let c = NatsCluster::start(3).await;
    let a = host(&c, "host-a").await;
    let stub = stub(vec![
        Turn::tool_call("files", json!({"op": "write", "path": "a.txt", "content": "hi"})),
        Turn::text("written"),
        Turn::text("remembered"),
    ]);
    let cap = anthropic_capsule(&stub.url(), &[("files", "{DIST}/tool-files.wasm")], "");
    let mut opts = cap.options(Default::default());
    opts.cluster = Some(a.clone());
    let session = capsule_actors::Session::launch(opts).await.expect("launch on the cluster");
    let (outcome, _) = run_task(&session, "write it").await;
    assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, "written"));
    let sid = session.session_id.clone();
    // The records are JetStream subjects, in order; nothing went to local journal files.
    let (_, conversation) = StreamLog::open(&a.js, &sid, Record::Conversation).await.expect("conversation");
    assert_eq!(kinds(&conversation), vec!["user", "assistant", "tool", "assistant"]);
    let (_, trace) = StreamLog::open(&a.js, &sid, Record::Trace).await.expect("trace");
    let trace = kinds(&trace);
    for k in ["session_start", "task_start", "tool_call_started", "tool_call", "task_end"] {
        assert!(trace.contains(&k.to_string()), "{k} in {trace:?}");
    }
    // A step's conversation line and trace line are sent at once, the conversation's first:
    // in the stream, the user message precedes `task_start` and the tool result `tool_call`.
    let conversation_seq = stored_entries(&a.js, &sid, Record::Conversation).await;
    let trace_seq = stored_entries(&a.js, &sid, Record::Trace).await;
    let seq_of = |entries: &[StoredEntry], key: &str, value: &str| {
        entries.iter().find(|e| e.value[key] == value).map(|e| e.sequence).unwrap_or_else(|| panic!("{value}"))
    };
    assert!(seq_of(&conversation_seq, "role", "user") < seq_of(&trace_seq, "event_type", "task_start"));
    assert!(seq_of(&conversation_seq, "role", "tool") < seq_of(&trace_seq, "event_type", "tool_call"));
    // A reply asking for a tool: its `inference` line and the call's `tool_call_started` are
    // one step, one entry.
    assert_eq!(
        seq_of(&trace_seq, "event_type", "inference"),
        seq_of(&trace_seq, "event_type", "tool_call_started"),
        "{:?}",
        trace_seq.iter().map(|e| (e.sequence, e.value["event_type"].clone())).collect::<Vec<_>>()
    );
    let (_, raw) = StreamLog::open(&a.js, &sid, Record::Trace).await.expect("trace");
    let start: Value = serde_json::from_slice(&raw[0]).expect("session_start");
    assert_eq!(start["cluster"]["host"], "host-a", "{start}");
    assert!(start["cluster"]["epoch"].as_u64().is_some_and(|e| e > 0), "{start}");
    assert!(!session.dir.join("conversation.jsonl").exists(), "no local conversation record");
    // A crashed loop is restarted and rebuilds its context from the JetStream record.
    assert!(session.inject_loop_panic());
    eventually("the loop is restarted", || async { session.restarts().await.get("loop").copied() == Some(1) }).await;
    let (again, _) = run_task(&session, "what did you write?").await;
    assert_eq!(again.message, "remembered");
    let sent = stub.requests()[2].body["messages"].as_array().expect("messages").len();
    assert_eq!(sent, 5, "the whole first task, then the new question");
    // Another host cannot take the session while host-a renews its lease.
    let b = host(&c, "host-b").await;
    let e = b.leases.acquire(&sid, "host-b").await.expect_err("held");
    assert!(e.to_string().contains("E-CLU-005") && e.to_string().contains("host-a"), "{e}");
    // The lease is taken from under it (as after a partition): host-a's next renewal is
    // refused and the whole session stops.
    let kv = a.js.get_key_value("CAPSULE_LEASES").await.expect("bucket");
    kv.purge(&sid).await.expect("purge");
    let taken = b.leases.acquire(&sid, "host-b").await.expect("host-b takes it");
    assert_eq!(taken.record().host, "host-b");
    let (_, before) = StreamLog::open(&a.js, &sid, Record::Trace).await.expect("trace");
    eventually("the session stops", || async { session.get_task("any").await.is_err() }).await;
    // It wrote nothing after losing the lease, and takes no more tasks.
    let (_, after) = StreamLog::open(&a.js, &sid, Record::Trace).await.expect("trace");
    assert_eq!(after, before, "{:?}", kinds(&after));
    assert!(session.submit("more").await.is_err(), "the stopped session takes no task");
}
