//! The cluster-wide daily ceiling: three hosts' machine meters (each with its own ledger) share
//! one day total in KV on a real 3-node cluster; 30 calls admitted at once across them never
//! take the total past the ceiling, and what they settle is counted once. A change asked again
//! (as after a lost answer) is applied once, and changes go on while the bucket's leader is
//! lost.

use crate::nats::NatsCluster;
use capsule_actors::cluster::{self, ClusterHost};
use capsule_actors::spend::Limit;
use capsule_actors::spend::machine::{MachineArgs, MachineMeter, MachineMsg};
use ractor::Actor;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admission_across_three_hosts_never_passes_the_cluster_ceiling() {
    let c = NatsCluster::start(3).await;
    let ledgers = tempfile::tempdir().expect("tempdir");
    let mut meters = Vec::new();
    for h in 0..3 {
        let host = ClusterHost::start(&c.urls(), &format!("h{h}"), 3, Duration::from_secs(3)).await.expect("joins");
        let args = MachineArgs {
            cluster: Some(host.spend.clone()),
            ..MachineArgs::new(ledgers.path().join(format!("h{h}")), Some(1000))
        };
        let (meter, _) = Actor::spawn(None, MachineMeter, args).await.expect("meter");
        meters.push(meter);
    }
    // 30 calls of 100 tokens at once, spread over the three hosts: exactly 10 fit.
    let mut asks = Vec::new();
    for i in 0..30u64 {
        let meter = meters[(i % 3) as usize].clone();
        asks.push(tokio::spawn(async move {
            let session: Arc<str> = format!("ses_{i}").into();
            let r = meter
                .call(|reply| MachineMsg::Reserve { session: session.clone(), id: i, tokens: 100, reply }, None)
                .await
                .expect("answered");
            (session, i, meter, r.unwrap())
        }));
    }
    let mut granted = Vec::new();
    for a in asks {
        let (session, id, meter, r) = a.await.expect("task");
        match r {
            Ok(()) => granted.push((session, id, meter)),
            Err(refusal) => {
                assert_eq!(refusal.limit, Limit::Machine);
                assert!(refusal.used + 100 > 1000, "refused only when it would not fit: {refusal:?}");
            }
        }
    }
    assert_eq!(granted.len(), 10, "the ceiling admits exactly 10 calls of 100");
    let client = cluster::connect(&c.urls()).await.expect("connects");
    let spend = cluster::ClusterSpend::open(&async_nats::jetstream::new(client), 3).await.expect("bucket");
    let day = capsule_actors::spend::machine::UtcDay::of(std::time::SystemTime::now()).to_string();
    let t = spend.totals(&day).await.expect("totals");
    assert_eq!((t.settled, t.reserved, t.open.len()), (0, 1000, 10), "{t:?}");
    // Each spends 80 of its 100: settled once each; the freed room admits two more calls.
    for (session, id, meter) in &granted {
        let settle =
            |ack| MachineMsg::Settle { session: session.clone(), id: *id, input: 60, output: 20, ack: Some(ack) };
        assert!(meter.call(settle, None).await.expect("answered").unwrap(), "the settlement is durable");
    }
    let t = spend.totals(&day).await.expect("totals");
    assert_eq!((t.settled, t.reserved, t.open.len()), (800, 0, 0), "{t:?}");
    let mut more = 0;
    for i in 100..110u64 {
        let session: Arc<str> = "ses_more".into();
        let r = meters[(i % 3) as usize]
            .call(|reply| MachineMsg::Reserve { session, id: i, tokens: 100, reply }, None)
            .await
            .expect("answered")
            .unwrap();
        more += usize::from(r.is_ok());
    }
    assert_eq!(more, 2, "800 settled leaves room for two more calls of 100");
    let t = spend.totals(&day).await.expect("totals");
    assert!(t.settled + t.reserved <= 1000, "{t:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_asked_again_is_applied_once_and_changes_go_on_when_the_leader_is_lost() {
    let mut c = NatsCluster::start(3).await;
    let js = async_nats::jetstream::new(cluster::connect(&c.urls()).await.expect("connects"));
    let spend = cluster::ClusterSpend::open(&js, 3).await.expect("bucket");
    let day = "2000-01-01";
    // Each change twice, as a meter tries it again after an answer it did not get.
    for _ in 0..2 {
        assert_eq!(spend.reserve(day, "m/ses_a/1", 100, 1000).await.expect("reserve"), Ok(()));
    }
    let t = spend.totals(day).await.expect("totals");
    assert_eq!((t.settled, t.reserved, t.open.len()), (0, 100, 1), "reserved once: {t:?}");
    for _ in 0..2 {
        spend.settle(day, "m/ses_a/1", 80).await.expect("settle");
    }
    spend.settle(day, "m/ses_unknown/9", 50).await.expect("an id the day does not hold");
    let t = spend.totals(day).await.expect("totals");
    assert_eq!((t.settled, t.reserved, t.open.len()), (80, 0, 0), "settled once: {t:?}");

    // Kill the server leading the bucket; 20 reservations asked at once all get through the
    // election, each counted once.
    let mut stream = js.get_stream("KV_CAPSULE_SPEND").await.expect("the bucket's stream");
    let leader = stream.info().await.expect("info").cluster.as_ref().and_then(|c| c.leader.clone()).expect("a leader");
    let i: usize = leader.trim_start_matches('n').parse().expect("a test server's name");
    c.kill(i);
    let asks: Vec<_> = (0..20)
        .map(|k| {
            let spend = spend.clone();
            tokio::spawn(async move { spend.reserve(day, &format!("m/ses_b/{k}"), 10, 1000).await })
        })
        .collect();
    for (k, ask) in asks.into_iter().enumerate() {
        let granted = ask.await.expect("task").unwrap_or_else(|e| panic!("reservation {k} across the election: {e}"));
        assert_eq!(granted, Ok(()), "reservation {k}");
    }
    let t = spend.totals(day).await.expect("totals");
    assert_eq!((t.settled, t.reserved, t.open.len()), (80, 200, 20), "{t:?}");
}
