//! A door token outlives its session's host: a capsule with `network.authentication: bearer`
//! runs on host A, a client talks to it through host B's API with the token A minted, and A is
//! killed. Once B has claimed the session, the same token is accepted there (the cluster's book
//! keeps its verification key, never the token), a wrong one is still refused, and B's copy of
//! the session has no token file of its own.

use crate::cluster_support::*;
use crate::nats::NatsCluster;
use capsule_actors::cluster;
use capsule_stub::StubHandle;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Every file named `name` under `dir`.
fn find_files(dir: &Path, name: &str) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            found.extend(find_files(&path, name));
        } else if path.file_name().is_some_and(|n| n == name) {
            found.push(path);
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_a_door_token_is_still_accepted_after_its_session_moves_to_another_host() {
    let nats = NatsCluster::start(3).await;
    let urls = nats.urls().join(",");
    let stubs_a: Vec<StubHandle> = vec![provider(false)];
    let stubs_b: Vec<StubHandle> = vec![provider(false)];
    let bearer = "network: {authentication: bearer}\n";
    let mut a = start_host_with(0, &urls, &stubs_a, bearer, None).await;
    let b = start_host_with(1, &urls, &stubs_b, bearer, None).await;
    let (name, (session, door)) = a.capsules.iter().next().map(|(n, s)| (n.clone(), s.clone())).expect("one capsule");
    let minted = find_files(a.root.path(), "door.token");
    let file =
        minted.iter().find(|p| p.to_string_lossy().contains(&session)).expect("A wrote the session's door token");
    let token = std::fs::read_to_string(file).expect("token").trim().to_string();

    // A task given at A's door (A2A, not waiting for it), with the token and without it.
    let send = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {
        "message": {"kind": "message", "messageId": "m1", "role": "user", "parts": [{"kind": "text", "text": "do every step"}]},
        "configuration": {"blocking": false}}});
    let a2a = format!("{}/a2a", door.trim_end_matches('/'));
    let post = |token: Option<&str>| {
        let mut request = reqwest::Client::new().post(&a2a).json(&send);
        if let Some(t) = token {
            request = request.bearer_auth(t);
        }
        async move {
            let answer = request.send().await.expect("A's door answers");
            (answer.status().as_u16(), answer.json::<Value>().await.expect("json"))
        }
    };
    let (status, refused) = post(None).await;
    assert_eq!(status, 401, "no door token: refused: {refused}");
    let (status, accepted) = post(Some(&token)).await;
    assert_eq!(status, 200, "{accepted}");
    let task = accepted["result"]["id"].as_str().unwrap_or_else(|| panic!("a task: {accepted}")).to_string();
    // Through B's API, before the move: the token reaches A's door, no token is refused there.
    let get = json!({"jsonrpc": "2.0", "id": 2, "method": "tasks/get", "params": {"id": task}});
    let (status, before) = via_api_with_door_token(&b, &session, &token, &get).await;
    assert_eq!((status, &before["result"]["id"]), (200, &json!(task)), "{before}");
    let (status, none) = via_api(&b, &session, &get).await;
    assert_eq!(status, 401, "no token through B: refused by A's door: {none}");

    kill_once_going(&mut a, &name).await;

    // Until B holds the session the answer is `503 moving`; from then on the token A minted
    // is accepted by B's door, never refused.
    let js = async_nats::jetstream::new(cluster::connect(&nats.urls()).await.expect("connects"));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let after: Value = loop {
        let (status, answer) = via_api_with_door_token(&b, &session, &token, &get).await;
        assert_ne!(status, 401, "the token was refused after the move: {answer}");
        let moved = trace(&js, &session)
            .await
            .iter()
            .any(|e| e["event_type"] == "session_start" && e["cluster"]["host"] == "h1");
        if status == 200 && moved && answer["result"]["status"]["state"] == "completed" {
            break answer;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the task did not complete on host B within 60 s: {status} {answer}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert_eq!(after["result"]["id"], task.as_str(), "{after}");
    let (status, wrong) = via_api_with_door_token(&b, &session, "not-the-token", &get).await;
    assert_eq!(status, 401, "a wrong token is still refused after the move: {wrong}");
    let (status, none) = via_api(&b, &session, &get).await;
    assert_eq!(status, 401, "no token is still refused after the move: {none}");
    let on_b = find_files(b.root.path(), "door.token");
    assert!(
        !on_b.iter().any(|p| p.to_string_lossy().contains(&session)),
        "B has no token file for the claimed session (the token never left A): {on_b:?}"
    );
}
