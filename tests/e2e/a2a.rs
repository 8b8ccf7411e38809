//! The A2A endpoint over a real socket, without the SDK: bad requests get the error code the
//! A2A spec names for them and the capsule keeps serving; the card's URLs follow the `Host`
//! the client used.

use crate::common::*;
use capsule_actors::door;
use capsule_stub::Turn;
use serde_json::{Value, json};

async fn post(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    let r = reqwest::Client::new()
        .post(format!("{url}/a2a"))
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .expect("answer");
    let status = r.status().as_u16();
    (status, r.json().await.expect("a JSON-RPC answer"))
}

fn call(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_requests_on_the_a2a_path_get_the_code_a2a_names_and_the_capsule_keeps_serving() {
    let stub = stub(vec![Turn::text("still serving")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = std::sync::Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let url = d.url();
    let huge = format!(
        r#"{{"jsonrpc":"2.0","id":1,"method":"SendMessage","params":{{"message":{{"parts":[{{"text":"{}"}}]}}}}}}"#,
        "x".repeat(3 * 1024 * 1024)
    );
    let cases: Vec<(&str, String, u16, i64)> = vec![
        ("not JSON", "{nope".into(), 400, -32700),
        ("not a request", r#"{"jsonrpc":"2.0","id":1}"#.into(), 400, -32600),
        ("wrong version", r#"{"jsonrpc":"1.0","id":1,"method":"GetTask"}"#.into(), 400, -32600),
        ("unknown method", call("tasks/explode", json!({})), 200, -32601),
        ("params of the wrong shape", call("SendMessage", json!({"message": "hi"})), 200, -32602),
        ("no id for GetTask", call("GetTask", json!({})), 200, -32602),
        (
            "an agent's message",
            call("SendMessage", json!({"message": {"role": "ROLE_AGENT", "parts": [{"text": "x"}]}})),
            200,
            -32602,
        ),
        (
            "no text part",
            call("message/send", json!({"message": {"role": "user", "parts": [{"kind": "data", "data": {}}]}})),
            200,
            -32005,
        ),
        ("unknown task (v1.0)", call("GetTask", json!({"id": "tsk_nope"})), 200, -32001),
        ("unknown task (v0.3)", call("tasks/cancel", json!({"id": "tsk_nope"})), 200, -32001),
        ("subscribe to an unknown task", call("SubscribeToTask", json!({"id": "tsk_nope"})), 200, -32001),
        (
            "a message for an unknown task",
            call("SendMessage", json!({"message": {"taskId": "tsk_nope", "parts": [{"text": "x"}]}})),
            200,
            -32001,
        ),
        ("push notifications", call("CreateTaskPushNotificationConfig", json!({})), 200, -32003),
        ("extended card", call("GetExtendedAgentCard", json!({})), 200, -32007),
        ("a page too big", call("ListTasks", json!({"pageSize": 1000})), 200, -32602),
        ("a huge body", huge, 413, -32600),
    ];
    for (what, body, status, code) in cases {
        let (got, v) = post(&url, body).await;
        assert_eq!((got, v["error"]["code"].as_i64()), (status, Some(code)), "{what}: {v}");
        assert!(
            v["error"]["message"].as_str().is_some_and(|m| m.len() > 10),
            "{what}: a sentence says what is wrong: {v}"
        );
    }
    assert!(stub.requests().is_empty(), "no bad request reached the provider");

    // Still serving: a good send completes; then the same task cannot take another message
    // (it is not waiting for input) and cannot be canceled (it ended).
    let (_, ok) = post(
        &url,
        call("SendMessage", json!({"message": {"role": "ROLE_USER", "messageId": "m", "parts": [{"text": "hi"}]}})),
    )
    .await;
    let task = &ok["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{ok}");
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "still serving");
    let id = task["id"].as_str().expect("id");
    let (_, again) =
        post(&url, call("SendMessage", json!({"message": {"taskId": id, "parts": [{"text": "more"}]}}))).await;
    assert_eq!(again["error"]["code"], -32004, "{again}");
    let (_, cancel) = post(&url, call("CancelTask", json!({"id": id}))).await;
    assert_eq!(cancel["error"]["code"], -32002, "{cancel}");
    let (_, sub) = post(&url, call("tasks/resubscribe", json!({"id": id}))).await;
    assert_eq!(sub["error"]["code"], -32004, "a subscription to an ended task is refused: {sub}");
    let (_, got) = post(&url, call("tasks/get", json!({"id": id}))).await;
    assert_eq!(
        (got["result"]["kind"].as_str(), got["result"]["status"]["state"].as_str()),
        (Some("task"), Some("completed")),
        "{got}"
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_card_advertises_the_a2a_path_at_the_host_the_client_used_in_both_versions() {
    let stub = stub(vec![]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = std::sync::Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let port = d.addr.port();
    let card: Value = reqwest::Client::new()
        .get(format!("{}/.well-known/agent-card.json", d.url()))
        .header("host", format!("localhost:{port}"))
        .send()
        .await
        .expect("card")
        .json()
        .await
        .expect("json");
    let a2a = format!("http://localhost:{port}/a2a");
    assert_eq!(
        card["supportedInterfaces"],
        json!([
            {"url": a2a, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": a2a, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ])
    );
    assert_eq!((card["url"].as_str(), card["preferredTransport"].as_str()), (Some(a2a.as_str()), Some("JSONRPC")));
    assert_eq!(card["murmurDoorUrl"], format!("http://localhost:{port}/"));
    session.shutdown().await;
}
