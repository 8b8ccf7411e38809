//! A lease renewal that JetStream stored but whose answer was lost with the connection (the
//! relay in `nats_cut.rs` cuts it at that moment):
//! - the lease's next renewal finds the lost one stored and goes on from it, while a lease that
//!   another host took after such a loss is still reported lost;
//! - a `capsule host` whose connection is cut that way keeps its session: the keeper gives up
//!   the unanswered try after a renewal period and renews on the new connection within the TTL;
//! - and one whose connection is cut after a journal append was stored sends the append again
//!   after `ACK_WAIT`, deduplicated, instead of waiting out the client's own 5 s.

use crate::cluster_support::*;
use crate::nats::NatsCluster;
use crate::nats_cut::{AnswerCut, JOURNAL_APPEND, LEASE_WRITE};
use async_nats::jetstream;
use capsule_actors::cluster::{self, ClusterError, LEASE_BUCKET, Lease, LeaseRecord, Leases};
use std::time::Duration;

const TTL: Duration = Duration::from_secs(3);

/// The lease's revision in the bucket, read on a connection of its own.
async fn stored_revision(direct: &jetstream::Context, session: &str) -> u64 {
    let kv = direct.get_key_value(LEASE_BUCKET).await.expect("bucket");
    kv.entry(session).await.expect("read").expect("a lease").revision
}

/// Renew, trying again while the client reconnects (any refusal but `Lost` is a transport's).
async fn renew_patiently(lease: &mut Lease) -> Result<(), ClusterError> {
    let deadline = tokio::time::Instant::now() + TTL;
    loop {
        match tokio::time::timeout(Duration::from_secs(1), lease.renew()).await {
            Ok(Ok(())) => return Ok(()),
            Ok(Err(e @ ClusterError::Lost { .. })) => return Err(e),
            Ok(Err(e)) if tokio::time::Instant::now() >= deadline => return Err(e),
            _ if tokio::time::Instant::now() >= deadline => panic!("no renewal got an answer within the TTL"),
            _ => {}
        }
    }
}

/// Arm the relay and renew: the write is stored, its answer lost with the connection.
async fn renew_and_lose_the_answer(cut: &AnswerCut, lease: &mut Lease, direct: &jetstream::Context, session: &str) {
    let (cuts, before) = (cut.cuts(), stored_revision(direct, session).await);
    cut.arm(LEASE_WRITE);
    let lost = tokio::time::timeout(Duration::from_secs(1), lease.renew()).await;
    assert!(!matches!(lost, Ok(Ok(()))), "the renewal's answer was cut, yet it reported success");
    cut.wait_cuts(cuts + 1, Duration::from_secs(5)).await;
    assert!(stored_revision(direct, session).await > before, "the cut renewal was stored");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renewal_stored_without_an_answer_is_found_by_the_next_and_a_takeover_is_still_a_loss() {
    let nats = NatsCluster::start(1).await;
    let cut = AnswerCut::start(&nats.urls()[0]).await;
    let js = jetstream::new(cluster::connect(std::slice::from_ref(&cut.url)).await.expect("connects"));
    let direct = jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let leases = Leases::open(&js, 1, TTL).await.expect("bucket");
    let mut lease = leases.acquire("ses_cut", "host-a").await.expect("taken");
    let mine = lease.record().clone();

    renew_and_lose_the_answer(&cut, &mut lease, &direct, "ses_cut").await;
    renew_patiently(&mut lease).await.expect("the next renewal goes on from the stored one");
    renew_patiently(&mut lease).await.expect("and so does the one after");
    let others = Leases::open(&direct, 1, TTL).await.expect("bucket");
    assert_eq!(others.holder("ses_cut").await.expect("read"), Some(mine.clone()), "still this host's, same epoch");

    // Lost again, and then the lease runs out and another host takes it: that is no write of
    // this lease's, and the renewal must say the lease is lost.
    renew_and_lose_the_answer(&cut, &mut lease, &direct, "ses_cut").await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let theirs = loop {
        match others.acquire("ses_cut", "host-b").await {
            Ok(l) => break l,
            Err(ClusterError::Held { .. }) if tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await
            }
            Err(e) => panic!("host-b could not take the expired lease: {e}"),
        }
    };
    match renew_patiently(&mut lease).await {
        Err(ClusterError::Lost { .. }) => {}
        other => panic!("a lease host-b took was renewed by host-a: {other:?}"),
    }
    let expected = LeaseRecord { host: "host-b".into(), epoch: theirs.record().epoch };
    assert_eq!(others.holder("ses_cut").await.expect("read"), Some(expected), "host-b's lease was left alone");
}

/// Steps of a task cut mid-way: fewer than the manifest's `max_turns` (20), and long enough to
/// outlast a TTL after the cut.
const CUT_STEPS: usize = 18;

/// A `capsule host` mid-task whose connection is cut once the server answered a publish to
/// `subject`: the session goes on, is never stopped or claimed again, takes every step once, and
/// its log has `noticed` (what the host saw). Returns the session's trace.
async fn a_host_cut_mid_task(subject: &'static str, noticed: &str) -> Vec<serde_json::Value> {
    // Three servers, as a host's buckets have three replicas; the host is given the relay in
    // front of one of them (after the cut it may reconnect to any).
    let nats = NatsCluster::start(3).await;
    let cut = AnswerCut::start(&nats.urls()[0]).await;
    // 300 ms a step: the task outlasts a TTL after the cut.
    let stub = provider_of(CUT_STEPS, 300, false);
    let h = start_host(0, &cut.url, std::slice::from_ref(&stub)).await;
    let (name, (session, door)) = h.capsules.iter().next().map(|(n, s)| (n.clone(), s.clone())).expect("a capsule");
    submit(&door).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while effects(&[h.root.path()], &name).is_empty() {
        assert!(tokio::time::Instant::now() < deadline, "the task did not get going within 60 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cut.arm(subject);
    cut.wait_cuts(1, Duration::from_secs(10)).await;
    let going = effects(&[h.root.path()], &name).len();
    assert!(going + 12 <= CUT_STEPS, "the task must outlast a TTL after the cut; it was at step {going}");

    let direct = jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let log = || std::fs::read_to_string(h.root.path().join("host.log")).unwrap_or_default();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !completed(&trace(&direct, &session).await) {
        if tokio::time::Instant::now() >= deadline {
            let kinds: Vec<String> = trace(&direct, &session)
                .await
                .iter()
                .map(|e| e["event_type"].as_str().unwrap_or("?").to_string())
                .collect();
            panic!(
                "the task did not complete; {} steps taken; its trace: {kinds:?}; the host's log:\n{}",
                effects(&[h.root.path()], &name).len(),
                log()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let log = log();
    assert!(!log.contains("stopping the session") && !log.contains("E-CLU"), "the session was stopped:\n{log}");
    assert!(log.contains(noticed), "the host's log says `{noticed}`:\n{log}");
    let resumed = trace(&direct, &session)
        .await
        .iter()
        .filter(|e| e["event_type"] == "session_start" && e["resumed"] == true)
        .count();
    assert_eq!(resumed, 0, "the session was stopped and claimed again instead of going on");
    let lines = effects(&[h.root.path()], &name);
    let expected: Vec<String> = (0..CUT_STEPS).map(|j| format!("step {j}")).collect();
    assert_eq!(lines, expected, "every step once, in order");
    trace(&direct, &session).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_connection_is_cut_after_a_lease_write_keeps_its_session() {
    a_host_cut_mid_task(LEASE_WRITE, "had been stored; renewing from it").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_whose_connection_is_cut_after_a_journal_append_sends_it_again_once() {
    let trace = a_host_cut_mid_task(JOURNAL_APPEND, "was not acknowledged within 1s; sending it again").await;
    // The append sent again was deduplicated: each step's record is there once, in order.
    let calls: Vec<&str> = trace
        .iter()
        .filter(|e| e["event_type"] == "tool_call")
        .map(|e| e["tool_call_id"].as_str().unwrap_or("?"))
        .collect();
    let expected: Vec<String> = (0..CUT_STEPS).map(|j| format!("call-{j}")).collect();
    assert_eq!(calls, expected, "each tool call's record once, in order");
}
