//! Write before act when the journal write and the next call overlap: a turn's last tool
//! result is journaled while the next driver call builds its request, and the call's send gate
//! holds every request until the write is acknowledged (`actors/src/agent_loop/unacked.rs`).

use crate::common::*;
use capsule_protocol::frame::Frame;
use capsule_protocol::manifest::Limits;
use capsule_protocol::neutral::{DriverRequest, Message};
use capsule_protocol::trace::{ExitStatus, TraceKind};
use capsule_runtime::{
    ArtifactRole, GatewayRoute, Grants, LoadedArtifact, NoEvents, OutgoingPolicy, ToolInput, ToolStatus,
    gateway_address, send_gate,
};
use capsule_stub::Turn;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_result_that_is_not_journaled_is_never_sent_shown_or_kept() {
    let stub =
        stub(vec![Turn::tool_call("files", json!({"op": "list", "path": "."})), Turn::text("second task answered")]);
    let cap = anthropic_capsule(&stub.url(), &[("files", "{ARTIFACTS}/files")], "");
    let session = cap.launch().await.expect("launch");
    assert!(session.inject_journal_failure(TraceKind::ToolCall), "the journal takes the test hook");
    let (outcome, frames) = run_task(&session, "list the folder").await;
    assert_eq!(outcome.exit_status, ExitStatus::Failed, "{}", outcome.message);
    assert!(outcome.message.starts_with("E-RUN-064"), "the journal's code: {}", outcome.message);
    assert_eq!(stub.requests().len(), 1, "the call after the unjournaled result never reached the provider");
    let kinds: Vec<&str> = frames.iter().map(|f| f.frame.event_name()).collect();
    assert!(
        !frames.iter().any(|f| matches!(f.frame, Frame::Artifact { .. })),
        "no frame shows the unjournaled result: {kinds:?}"
    );
    let working = |f: &&capsule_protocol::frame::SharedFrame| matches!(&f.frame, Frame::Status { status, .. } if status.message == "inference turn 2");
    assert!(!frames.iter().any(|f| working(&f)), "the turn that never happened is not shown: {kinds:?}");

    // The next task's request holds exactly what the journal holds: the result is not in the
    // context either.
    let (second, _) = run_task(&session, "again").await;
    assert_eq!(second.exit_status, ExitStatus::Ok, "{}", second.message);
    let sent = &stub.requests()[1].body;
    assert!(!sent.to_string().contains("tool_result"), "the unjournaled result was sent later: {sent}");
    let dir = session.dir.clone();
    session.shutdown().await;
    let record = std::fs::read_to_string(dir.join("conversation.jsonl")).expect("record");
    let roles: Vec<String> = record
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("json")["role"].as_str().unwrap_or("").into())
        .collect();
    assert_eq!(roles, ["user", "assistant", "user", "assistant"], "{record}");
}

/// Driver grants as the gateway builds them, keyless, to the stub at `endpoint`, behind `gate`,
/// with a guest deadline of `deadline_seconds`.
fn gated_driver(endpoint: &str, gate: capsule_runtime::SendGate, deadline_seconds: u64) -> Grants {
    Grants {
        role: ArtifactRole::Driver,
        env: vec![
            ("MURMUR_INFERENCE_ENDPOINT".into(), gateway_address()),
            ("MURMUR_INFERENCE_MODEL".into(), "claude-test".into()),
            ("MURMUR_INFERENCE_DRIVER".into(), "anthropic".into()),
        ]
        .into(),
        preopen: None,
        disk: Default::default(),
        limits: Limits { deadline_seconds, ..Limits::default() },
        policy: OutgoingPolicy {
            allow: Vec::new(),
            gateway: Some(GatewayRoute {
                traceparent: None,
                endpoint: endpoint.parse().expect("stub url"),
                fixed: None,
                key: None,
                style: Default::default(),
            }),
            gate: Some(gate),
        },
    }
}

/// A one-message neutral request, as the driver's input.
fn hello_request() -> String {
    let request = DriverRequest {
        model: "claude-test".into(),
        max_tokens: 64,
        system: String::new(),
        messages: vec![Message::user_text("hi")],
        tools: Vec::new(),
        params: Default::default(),
        continuation_id: None,
        prompt_cache_key: "k".into(),
    };
    serde_json::to_string(&request).expect("request")
}

/// Poll until the call's request is held at the gate.
async fn held(opener: &capsule_runtime::GateOpener) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while opener.waiting() == 0 {
        assert!(tokio::time::Instant::now() < deadline, "the request never reached the gate");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_driver_call_sends_nothing_before_its_gate_opens_and_nothing_at_all_when_refused() {
    let stub = stub(vec![Turn::text("sent after the gate opened")]);
    let host = host();
    let driver = LoadedArtifact::load_file(&host, "driver-anthropic", &dist("driver-anthropic")).expect("loads");
    let input = hello_request();
    for open in [false, true] {
        let (opener, gate) = send_gate();
        let grants = gated_driver(&stub.url(), gate, 60);
        let (host, driver, input) = (host.clone(), driver.clone(), input.clone());
        let call = tokio::spawn(async move {
            let data = ToolInput { data: Some(input), log_path: None };
            driver.call(&host, &grants, Arc::new(NoEvents), data).await
        });
        // The guest built its request and handed it to the host, which holds it at the gate.
        held(&opener).await;
        assert!(stub.requests().is_empty(), "a request left before the gate was decided");
        if open {
            opener.open()
        } else {
            opener.refuse()
        }
        let outcome = call.await.expect("joined");
        let status = outcome.result.as_ref().map(|r| r.status);
        if open {
            assert_eq!(status.ok(), Some(ToolStatus::Passed), "{:?}", outcome.result);
            assert_eq!(stub.requests().len(), 1, "the opened gate let the request go");
        } else {
            assert_ne!(status.ok(), Some(ToolStatus::Passed), "a refused call does not pass");
            assert!(stub.requests().is_empty(), "a refused gate sent nothing");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wait_at_the_gate_is_the_hosts_time_not_the_drivers_deadline() {
    // A journal slower than the driver's whole deadline (a JetStream leader election) must not
    // make the call time out: the wait is kept off the guest's clock.
    let stub = stub(vec![Turn::text("answered after a long wait")]);
    let host = host();
    let driver = LoadedArtifact::load_file(&host, "driver-anthropic", &dist("driver-anthropic")).expect("loads");
    let (opener, gate) = send_gate();
    let grants = gated_driver(&stub.url(), gate, 1);
    let call = tokio::spawn(async move {
        let data = ToolInput { data: Some(hello_request()), log_path: None };
        driver.call(&host, &grants, Arc::new(NoEvents), data).await
    });
    held(&opener).await;
    // Held past the one-second deadline: wall time has to pass, there is nothing to poll for.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    opener.open();
    let outcome = call.await.expect("joined");
    let status = outcome.result.as_ref().map(|r| r.status);
    assert_eq!(status.ok(), Some(ToolStatus::Passed), "{:?}", outcome.result);
    assert_eq!(stub.requests().len(), 1);
}
