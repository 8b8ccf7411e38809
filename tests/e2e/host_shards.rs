//! A host's capsules run on its shards (`capsule_actors::shards`): each capsule's session, its
//! actors and its door on one runtime of one worker, the fewest-loaded at its launch, and
//! nothing of it left there once it stops.

use crate::common::*;
use capsule_actors::host::{Action, CapsuleState, HostHandle, RestartPolicy};
use capsule_actors::shards::Shards;
use capsule_protocol::host_file::PlannedCapsule;
use capsule_stub::Turn;
use serde_json::json;
use std::sync::Arc;

/// Tasks alive on each shard now (each shard always runs its timer floor: one task).
fn tasks(shards: &Shards) -> Vec<usize> {
    shards.handles().map(|h| h.metrics().num_alive_tasks()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_capsule_runs_on_a_shard_of_its_own_and_leaves_nothing_there_when_stopped() {
    let stub_a = stub(vec![
        Turn::tool_call("files", json!({"op": "write", "path": "a.txt", "content": "on a shard"})),
        Turn::text("alpha wrote"),
    ]);
    let stub_b = stub((0..10).map(|_| Turn::text("pong")).collect());
    let a = anthropic_capsule(&stub_a.url(), &[("files", "{DIST}/tool-files.wasm")], "");
    let b = anthropic_capsule(&stub_b.url(), &[], "");
    let shards = Arc::new(Shards::new(2).expect("shards"));
    assert_eq!(tasks(&shards), vec![1, 1], "a shard runs its timer floor and nothing else");
    let planned = |name: &str, cap: &Capsule| PlannedCapsule {
        name: name.into(),
        manifest: cap.path().to_path_buf(),
        workdir: cap.workdir.clone(),
        port: 0,
    };
    let shared = capsule_actors::host::Shared { shards: Some(shards.clone()), ..loopback_shared() };
    let host = HostHandle::start(vec![planned("alpha", &a), planned("beta", &b)], shared, RestartPolicy::default())
        .await
        .expect("host starts");
    let settled = host.settled().await.expect("settled");
    assert!(settled.iter().all(|e| e.state == CapsuleState::Running), "{settled:?}");
    assert_eq!(shards.loads(), vec![1, 1], "two capsules, one on each shard");
    // A session is a tree of actors and a door: its tasks are on its shard, not the host's.
    assert!(tasks(&shards).iter().all(|&n| n >= 10), "each shard runs a session: {:?}", tasks(&shards));

    // Alpha's task runs its driver and its file tool there, and the file is written.
    let alpha = host.session("alpha").await.expect("host answers").expect("alpha runs");
    let (outcome, _) = run_task(&alpha, "write it").await;
    assert_eq!(outcome.message, "alpha wrote");
    assert_eq!(std::fs::read_to_string(a.workdir.join("files/a.txt")).expect("written"), "on a shard");
    drop(alpha);

    // Stopped, alpha leaves its shard: counted out, and every task of its session ended.
    let stopped = host.act("alpha", Action::Stop).await.expect("stop");
    assert_eq!(stopped.state, CapsuleState::Stopped);
    let loads = shards.loads();
    assert_eq!(loads.iter().sum::<usize>(), 1, "{loads:?}");
    let freed = loads.iter().position(|&n| n == 0).expect("a shard without capsules");
    eventually("the stopped session's tasks end", || {
        let now = tasks(&shards);
        async move { now[freed] == 1 }
    })
    .await;
    assert!(tasks(&shards)[1 - freed] >= 10, "beta still runs on its shard");
    let beta = host.session("beta").await.expect("host answers").expect("beta runs");
    assert_eq!(run_task(&beta, "ping").await.0.message, "pong");
    drop(beta);

    // Started again, it goes to the shard with the fewest: the one it left.
    host.act("alpha", Action::Start).await.expect("start");
    assert_eq!(shards.loads(), vec![1, 1]);
    assert!(tasks(&shards)[freed] >= 10, "alpha runs on the freed shard again");

    host.shutdown().await.expect("shutdown");
    assert_eq!(shards.loads(), vec![0, 0]);
    eventually("every session's tasks end with the host's shutdown", || {
        let now = tasks(&shards);
        async move { now.iter().all(|&n| n == 1) }
    })
    .await;
}
