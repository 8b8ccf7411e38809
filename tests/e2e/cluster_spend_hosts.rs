//! The cluster's spend ceiling with the real binary: 30 capsules on three `capsule host
//! --cluster` processes run tasks at once under one cluster-wide `machine_tokens_per_day`.
//! The tokens settled in the cluster's day total never exceed the ceiling, some calls are
//! refused once it is reached, and every reservation is settled or released in the end.

use crate::cluster_support::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster;
use capsule_stub::{Script, Stub, StubHandle, ToolCall, Turn, Usage};
use serde_json::json;
use std::time::Duration;

const CEILING: u64 = 6_000;

/// Each answer costs 150 output tokens; each task would take 5 calls if the ceiling allowed.
fn costly_provider() -> StubHandle {
    let usage = || Some(Usage { output_tokens: Some(150), ..Default::default() });
    let mut turns: Vec<Turn> = (0..4)
        .map(|j| Turn {
            tool_calls: Some(vec![ToolCall {
                id: Some(format!("call-{j}")),
                name: "files".into(),
                input: json!({"op": "append", "path": "effects.txt", "content": format!("step {j}\n")}),
            }]),
            usage: usage(),
            delay_ms: Some(50),
            ..Default::default()
        })
        .collect();
    turns.push(Turn { text: Some("done".into()), usage: usage(), ..Default::default() });
    Stub::start(Script::new(turns)).expect("stub starts")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_thirty_capsules_on_three_hosts_never_settle_past_the_cluster_ceiling() {
    let nats = NatsCluster::start(3).await;
    let urls = nats.urls().join(",");
    let config = format!("spend: {{machine_tokens_per_day: {CEILING}, ledger_dir: '{{ROOT}}/ledger'}}\n");
    let stubs: Vec<Vec<StubHandle>> = (0..3).map(|_| (0..10).map(|_| costly_provider()).collect()).collect();
    let mut hosts = Vec::new();
    for (i, s) in stubs.iter().enumerate() {
        hosts.push(start_host_with(i, &urls, s, "  max_tokens: 200\n", Some(&config)).await);
    }
    let doors: Vec<String> = hosts.iter().flat_map(|h| h.capsules.values().map(|(_, d)| d.clone())).collect();
    futures::future::join_all(doors.iter().map(|d| submit(d))).await;

    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let sessions: Vec<String> = hosts.iter().flat_map(|h| h.capsules.values().map(|(s, _)| s.clone())).collect();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    let mut ends = Vec::new();
    for s in &sessions {
        loop {
            let t = trace(&js, s).await;
            if let Some(end) = t.iter().find(|e| e["event_type"] == "task_end") {
                ends.push(end["exit_status"].as_str().unwrap_or_default().to_string());
                break;
            }
            assert!(tokio::time::Instant::now() < deadline, "{s}'s task did not end within 120 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let spend = cluster::ClusterSpend::open(&js, 3).await.expect("spend bucket");
    let day = capsule_actors::spend::machine::UtcDay::of(std::time::SystemTime::now()).to_string();
    let totals = spend.totals(&day).await.expect("totals");
    assert!(totals.settled <= CEILING, "settled {} past the ceiling {CEILING}", totals.settled);
    assert_eq!(totals.reserved, 0, "every reservation was settled or released: {totals:?}");
    let refused = ends.iter().filter(|e| *e == "spend_ceiling_reached").count();
    assert!(refused > 0, "the ceiling was reached: {ends:?}");
    assert!(totals.settled > CEILING / 2, "calls were admitted until the ceiling was near: {totals:?}");
}
