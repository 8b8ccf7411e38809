//! Failure is a value: a driver trap, a tool panic, a deadline and a memory limit end as coded
//! errors that reach the loop and the client; crashed gateway and tools actors are restarted by
//! their supervisor and the next task works.

use crate::common::*;
use capsule_protocol::frame::{Frame, TaskState};
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;
use serde_json::json;

fn final_status(frames: &[capsule_protocol::frame::SharedFrame]) -> (TaskState, String) {
    frames
        .iter()
        .rev()
        .find_map(|f| match &f.frame {
            Frame::Status { status, is_final: true, .. } => Some((status.state, status.message.clone())),
            _ => None,
        })
        .expect("a final status frame")
}

fn artifacts(frames: &[capsule_protocol::frame::SharedFrame]) -> Vec<capsule_protocol::frame::ArtifactBody> {
    frames
        .iter()
        .filter_map(|f| if let Frame::Artifact { artifact, .. } = &f.frame { Some(artifact.clone()) } else { None })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_trap_fails_the_task_with_a_coded_error_that_reaches_the_client() {
    let cap = Capsule::new(
        "name: trap\nartifacts:\n  - {name: d, runtime: driver, source: '{DIST}/driver-trap.wasm', gateway: {endpoint: 'http://127.0.0.1:9', keyless: true}}\ninference: {model: m, driver: {artifact: d}}\n",
    );
    let session = cap.launch().await.expect("launch");
    let (outcome, frames) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::Failed);
    assert!(outcome.message.contains("E-RUN-032"), "{}", outcome.message);
    assert!(outcome.message.contains("deliberate panic"), "the guest's panic text is kept: {}", outcome.message);
    let (state, message) = final_status(&frames);
    assert_eq!(state, TaskState::Failed);
    assert!(message.contains("E-RUN-032"), "{message}");
    let result = std::fs::read_to_string(&outcome.result_path).expect("result.txt");
    assert!(result.starts_with("error: E-RUN-032"), "{result}");
    // The host is still serving: a second task gets the same clean error.
    let (again, _) = run_task(&session, "again").await;
    assert_eq!(again.exit_status, ExitStatus::Failed);
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_panic_is_an_error_result_for_the_model_and_the_task_goes_on() {
    let stub = stub(vec![Turn::tool_call("boom", json!({})), Turn::text("recovered")]);
    let cap = anthropic_capsule(&stub.url(), &[("boom", "{DIST}/tool-panic.wasm")], "");
    let session = cap.launch().await.expect("launch");
    let (outcome, frames) = run_task(&session, "call the tool").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    assert_eq!(outcome.message, "recovered");
    let arts = artifacts(&frames);
    assert_eq!(arts.len(), 1);
    assert_eq!(arts[0].is_error, Some(true));
    assert!(arts[0].content.as_deref().unwrap_or("").contains("E-RUN-032"), "{:?}", arts[0].content);
    let second = &stub.requests()[1].body;
    let tool_msg = second["messages"].as_array().expect("messages").last().expect("last");
    assert_eq!(tool_msg["content"][0]["type"], "tool_result");
    assert_eq!(tool_msg["content"][0]["is_error"], true, "the model is told the call failed");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_past_its_deadline_gets_the_deadline_error_not_a_crash() {
    let stub = stub(vec![Turn::tool_call("spin", json!({})), Turn::text("ok")]);
    let cap = anthropic_capsule(
        &stub.url(),
        &[("spin", "{DIST}/guest-spin-forever.wasm")],
        "capabilities: {limits: {deadline_seconds: 1}}\n",
    );
    let session = cap.launch().await.expect("launch");
    let (outcome, frames) = run_task(&session, "spin").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok);
    let content = artifacts(&frames)[0].content.clone().unwrap_or_default();
    assert!(content.starts_with("E-RUN-030"), "{content}");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_past_its_memory_limit_gets_the_memory_error_not_a_crash() {
    let stub = stub(vec![Turn::tool_call("balloon", json!({})), Turn::text("ok")]);
    let cap = anthropic_capsule(
        &stub.url(),
        &[("balloon", "{DIST}/guest-balloon-memory.wasm")],
        "capabilities: {limits: {memory_bytes: 67108864}}\n",
    );
    let session = cap.launch().await.expect("launch");
    let (outcome, frames) = run_task(&session, "balloon").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok);
    let content = artifacts(&frames)[0].content.clone().unwrap_or_default();
    assert!(content.starts_with("E-RUN-031"), "{content}");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_waiting_past_its_deadline_fails_the_task_with_the_deadline_error() {
    let stub = stub(vec![Turn { text: Some("late".into()), delay_ms: Some(5_000), ..Default::default() }]);
    let cap = anthropic_capsule(&stub.url(), &[], "capabilities: {limits: {deadline_seconds: 1}}\n");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "wait").await;
    assert_eq!(outcome.exit_status, ExitStatus::Failed);
    assert!(outcome.message.starts_with("E-RUN-030"), "{}", outcome.message);
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_gateway_is_restarted_and_the_next_task_works() {
    let stub = stub(vec![Turn::text("after restart")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    assert!(session.inject_gateway_panic("anthropic"));
    eventually("the gateway restart", || async { session.restarts().await.get("gateway/anthropic") == Some(&1) }).await;
    let (outcome, _) = run_task(&session, "hi").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    assert_eq!(outcome.message, "after restart");
    let restarted =
        trace(&session).iter().any(|e| e["event_type"] == "actor_restarted" && e["actor"] == "gateway/anthropic");
    assert!(restarted, "the restart is in the trace");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_tools_actor_is_restarted_and_the_next_tool_call_works() {
    let stub = stub(vec![
        Turn::tool_call("files", json!({"op": "write", "path": "a.txt", "content": "x"})),
        Turn::text("done"),
    ]);
    let cap = anthropic_capsule(&stub.url(), &[("files", "{ARTIFACTS}/files")], "");
    let session = cap.launch().await.expect("launch");
    assert!(session.inject_tools_panic());
    eventually("the tools restart", || async { session.restarts().await.get("tools") == Some(&1) }).await;
    let (outcome, frames) = run_task(&session, "write").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    assert_eq!(artifacts(&frames)[0].is_error, Some(false));
    assert_eq!(std::fs::read_to_string(session.files.join("a.txt")).expect("written"), "x");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn repeated_crashes_back_off_and_a_crash_loop_stops_the_capsule_instead_of_restarting_forever() {
    let stub = stub(vec![Turn::text("after two restarts")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    assert!(session.inject_gateway_panic("anthropic"));
    eventually("the first restart", || async { session.restarts().await.get("gateway/anthropic") == Some(&1) }).await;
    assert!(session.inject_gateway_panic("anthropic"));
    eventually("the second restart, after its backoff", || async {
        session.restarts().await.get("gateway/anthropic") == Some(&2)
    })
    .await;
    let (outcome, _) = run_task(&session, "still serving?").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    // Past MAX_RESTARTS in the window the supervisor gives up and stops the capsule.
    for _ in 0..capsule_actors::MAX_RESTARTS {
        let before = session.restarts().await.get("gateway/anthropic").copied().unwrap_or(0);
        if !session.inject_gateway_panic("anthropic") {
            break;
        }
        eventually("a restart or the stop", || async {
            session.restarts().await.get("gateway/anthropic").copied().unwrap_or(u32::MAX) > before
                || session.restarts().await.is_empty()
        })
        .await;
    }
    eventually("the capsule to stop", || async { session.submit("x").await.is_err() }).await;
    let trace = trace(&session);
    assert!(trace.iter().filter(|e| e["event_type"] == "actor_restarted").count() >= 2);
}
