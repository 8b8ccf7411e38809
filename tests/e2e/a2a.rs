//! The A2A endpoint over a real socket, without the SDK: bad requests get the error code the
//! A2A spec names for them and the capsule keeps serving; the card's URLs follow the `Host`
//! the client used.

use crate::common::*;
use capsule_actors::door;
use capsule_stub::Turn;
use serde_json::{Value, json};

async fn post(url: &str, body: impl Into<reqwest::Body>) -> (u16, Value) {
    post_json_body(&format!("{url}/a2a"), body).await
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

/// A tool that asks a person puts its task into `input-required`; the time the person takes is
/// kept off the tool's deadline (1 s here, the answer comes after more than that); the answer
/// on the same task reaches the tool, and both steps are in the trace before the tool's result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_person_answers_a_waiting_task_after_the_tools_deadline_and_the_tool_goes_on() {
    let stub = stub(vec![Turn::tool_call("ask", json!({"prompt": "which branch?"})), Turn::text("going with main")]);
    let cap = anthropic_capsule(
        &stub.url(),
        &[("ask", "{DIST}/tool-ask.wasm")],
        "capabilities: {limits: {deadline_seconds: 1}}\n",
    );
    let session = std::sync::Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let url = d.url();
    let (_, asked) =
        post(&url, call("SendMessage", json!({"message": {"role": "ROLE_USER", "parts": [{"text": "ask me"}]}}))).await;
    let task = &asked["result"]["task"];
    assert_eq!(
        task["status"]["state"], "TASK_STATE_INPUT_REQUIRED",
        "a blocking send answers at the question: {asked}"
    );
    assert_eq!(task["status"]["message"]["parts"][0]["text"], "which branch?");
    let id = task["id"].as_str().expect("id").to_string();
    let (_, got) = post(&url, call("tasks/get", json!({"id": id}))).await;
    assert_eq!(got["result"]["status"]["state"], "input-required", "v0.3 spelling: {got}");

    // Longer than the tool's whole deadline, deliberately: the wait is not the tool's time.
    tokio::time::sleep(std::time::Duration::from_millis(1500)).await;
    let answer = json!({"message": {"role": "ROLE_USER", "taskId": id, "parts": [{"text": "main"}]}});
    let (_, done) = post(&url, call("SendMessage", answer.clone())).await;
    assert_eq!(done["result"]["task"]["status"]["state"], "TASK_STATE_COMPLETED", "{done}");
    assert_eq!(done["result"]["task"]["status"]["message"]["parts"][0]["text"], "going with main");
    let (_, again) = post(&url, call("SendMessage", answer)).await;
    assert_eq!(again["error"]["code"], -32004, "an ended task takes no more answers: {again}");

    let trace = trace(&session);
    let kinds: Vec<&str> = trace.iter().filter_map(|e| e["event_type"].as_str()).collect();
    let at = |k: &str| kinds.iter().position(|x| *x == k).unwrap_or_else(|| panic!("{k} in {kinds:?}"));
    assert!(at("input_required") < at("input_provided") && at("input_provided") < at("tool_call"), "{kinds:?}");
    let call = trace.iter().find(|e| e["event_type"] == "tool_call").expect("tool_call");
    assert_eq!((call["is_error"].as_bool(), call["content"].as_str()), (Some(false), Some("main")), "{call}");
    session.shutdown().await;
}

/// A task canceled while it waits for a person ends `canceled` and takes no answer after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_canceled_while_it_waits_for_a_person_ends_canceled() {
    let stub = stub(vec![Turn::tool_call("ask", json!({})), Turn::text("late")]);
    let cap = anthropic_capsule(&stub.url(), &[("ask", "{DIST}/tool-ask.wasm")], "");
    let session = std::sync::Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let (_, asked) =
        post(&d.url(), call("message/send", json!({"message": {"role": "user", "parts": [{"text": "ask"}]}}))).await;
    assert_eq!(asked["result"]["status"]["state"], "input-required", "{asked}");
    assert_eq!(asked["result"]["status"]["message"]["parts"][0]["text"], "What next?");
    let id = asked["result"]["id"].as_str().expect("id").to_string();
    let (_, canceled) = post(&d.url(), call("tasks/cancel", json!({"id": id}))).await;
    assert_eq!(canceled["result"]["status"]["state"], "canceled", "{canceled}");
    let (_, late) =
        post(&d.url(), call("message/send", json!({"message": {"taskId": id, "parts": [{"text": "too late"}]}}))).await;
    assert_eq!(late["error"]["code"], -32004, "{late}");
    let (_, got) = post(&d.url(), call("tasks/get", json!({"id": id}))).await;
    assert_eq!(got["result"]["status"]["state"], "canceled");
    session.shutdown().await;
}

/// On the Murmur door, as in Murmur: while a task waits for a person, the next `message/send`
/// answers it (and is answered with the task, working again); the waiting client's own
/// `message/send` then ends with the response.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_the_murmur_door_the_next_message_send_answers_the_waiting_task() {
    let stub = stub(vec![Turn::tool_call("ask", json!({"prompt": "which branch?"})), Turn::text("going with main")]);
    let cap = anthropic_capsule(&stub.url(), &[("ask", "{DIST}/tool-ask.wasm")], "");
    let session = std::sync::Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let door_send = |url: String, text: &'static str| async move {
        let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"role": "user", "parts": [{"text": text}]}}});
        let r = reqwest::Client::new().post(url).header("content-type", "application/json").body(body.to_string());
        r.send().await.expect("answer").json::<Value>().await.expect("json")
    };
    let first = tokio::spawn(door_send(d.url(), "ask me"));
    eventually("the task to wait for input", || {
        let s = session.clone();
        async move {
            s.list_tasks()
                .await
                .is_ok_and(|t| t.iter().any(|r| r.state == capsule_protocol::frame::TaskState::InputRequired))
        }
    })
    .await;
    let answered = door_send(d.url(), "main").await;
    assert_eq!(answered["result"]["status"]["state"], "working", "{answered}");
    let done = first.await.expect("first client");
    assert_eq!(done["result"]["status"]["response"], "going with main", "{done}");
    assert_eq!(session.list_tasks().await.expect("tasks").len(), 1, "the answer started no task");
    session.shutdown().await;
}

/// `lifecycle.input_timeout_secs`: a task no one answers in time fails with `E-RUN-091`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_task_no_one_answers_within_the_input_timeout_fails_with_its_code() {
    let stub = stub(vec![Turn::tool_call("ask", json!({})), Turn::text("never")]);
    let cap =
        anthropic_capsule(&stub.url(), &[("ask", "{DIST}/tool-ask.wasm")], "lifecycle: {input_timeout_secs: 1}\n");
    let session = std::sync::Arc::new(cap.launch().await.expect("launch"));
    let d = door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let (_, asked) = post(&d.url(), call("SendMessage", json!({"message": {"parts": [{"text": "ask"}]}}))).await;
    assert_eq!(asked["result"]["task"]["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{asked}");
    let id = asked["result"]["task"]["id"].as_str().expect("id").to_string();
    eventually("the wait to time out", || {
        let (url, id) = (d.url(), id.clone());
        async move {
            let (_, got) = post(&url, call("GetTask", json!({"id": id}))).await;
            got["result"]["status"]["state"] == "TASK_STATE_FAILED"
        }
    })
    .await;
    let (_, got) = post(&d.url(), call("GetTask", json!({"id": id}))).await;
    let why = got["result"]["status"]["message"]["parts"][0]["text"].as_str().unwrap_or("");
    assert!(why.contains("E-RUN-091") && why.contains("input-timeout"), "{got}");
    assert_eq!(stub.requests().len(), 1, "no call after the timeout");
    session.shutdown().await;
}

/// `capsule run --task` (the real binary): when a tool asks a person, the next line of stdin
/// is the answer, and the task ends with the model's reply to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsule_run_takes_the_answer_to_a_question_from_stdin() {
    use tokio::io::AsyncWriteExt;
    let stub = stub(vec![Turn::tool_call("ask", json!({"prompt": "which branch?"})), Turn::text("going with main")]);
    let cap = anthropic_capsule(&stub.url(), &[("ask", "{DIST}/tool-ask.wasm")], "");
    let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .arg("run")
        .arg(cap.path())
        .args(["--task", "ask me", "--workdir"])
        .arg(&cap.workdir)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("runs");
    let mut stdin = child.stdin.take().expect("stdin");
    stdin.write_all(b"main\n").await.expect("answer");
    drop(stdin);
    let out = tokio::time::timeout(std::time::Duration::from_secs(60), child.wait_with_output())
        .await
        .expect("ends")
        .expect("output");
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert_eq!(out.status.code(), Some(0), "{stdout}\n{stderr}");
    assert!(
        stderr.contains("which branch?") || stdout.contains("which branch?"),
        "the question is shown: {stdout}\n{stderr}"
    );
    let second = stub.requests().get(1).map(|r| r.body.to_string()).unwrap_or_default();
    assert!(second.contains("\"main\""), "the answer reached the model: {second}");
}
