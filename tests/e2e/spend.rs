//! The spend meter through the real loop: a refused call is never sent, the task ends
//! `spend_ceiling_reached` everywhere a client looks, the session refusal latches while the
//! session stays up, and sessions sharing the host meter never pass its ceiling.

use crate::common::*;
use capsule_actors::machine_meter::{MachineArgs, MachineMeter};
use capsule_protocol::frame::{Frame, TaskState};
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_session_ceiling_is_never_sent_and_the_refusal_latches() {
    let stub = stub(vec![Turn::text("never")]);
    let cap = anthropic_capsule(&stub.url(), &[], "  max_session_tokens: 100\n  max_tokens: 1000\n");
    let session = cap.launch().await.expect("launch");
    let (outcome, frames) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::SpendCeilingReached);
    assert!(
        outcome.message.starts_with("E-RUN-080") && outcome.message.contains("inference.max_session_tokens"),
        "{}",
        outcome.message
    );
    assert!(stub.requests().is_empty(), "the refused call was never sent");
    match &frames.last().expect("frames").frame {
        Frame::Status { status, is_final: true, .. } => {
            assert_eq!(status.state, TaskState::Failed);
            assert!(status.message.contains("E-RUN-080"));
        }
        other => panic!("last frame {other:?}"),
    }
    let result = std::fs::read_to_string(&outcome.result_path).expect("result");
    assert!(result.starts_with("error: E-RUN-080"), "{result}");
    let (again, _) = run_task(&session, "and again").await;
    assert_eq!(again.exit_status, ExitStatus::SpendCeilingReached, "the refusal latches");
    let t = trace(&session);
    let ev = t.iter().find(|e| e["event_type"] == "spend_ceiling_reached").expect("traced");
    assert_eq!(ev["limit"], "session");
    assert_eq!(ev["ceiling"], 100);
    assert!(ev["requested"].as_u64().expect("requested") > 1000, "estimate + max output");
    assert!(t.iter().any(|e| e["event_type"] == "task_end" && e["exit_status"] == "spend_ceiling_reached"));
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_within_the_ceiling_is_settled_and_counted() {
    let stub = stub(vec![Turn::text("fits")]);
    let cap = anthropic_capsule(&stub.url(), &[], "  max_session_tokens: 100000\n  max_tokens: 1000\n");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    let inference = trace(&session).into_iter().find(|e| e["event_type"] == "inference").expect("inference");
    assert!(inference["input_tokens_estimate"].as_u64().expect("estimate") > 0);
    assert_eq!(inference["input_tokens_actual"], 10, "the provider's count is recorded beside the estimate");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_sharing_the_host_meter_stop_at_its_ceiling() {
    let ledger = tempfile::tempdir().expect("ledger");
    let (meter, _) =
        ractor::Actor::spawn(None, MachineMeter, MachineArgs::new(ledger.path(), Some(1500))).await.expect("meter");
    // The first call reports 900 output tokens: settled ≈ estimate + 900, so the second
    // call's reservation (estimate + 1000) no longer fits under 1500.
    let first = Turn {
        usage: Some(capsule_stub::Usage { input_tokens: Some(10), output_tokens: Some(900), cached_tokens: None }),
        ..Turn::text("first")
    };
    let stub = stub(vec![first, Turn::text("second")]);
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let cap = anthropic_capsule(&stub.url(), &[], "  max_tokens: 1000\n");
        let mut opts = cap.options(Default::default());
        opts.machine = Some(meter.clone());
        let session = capsule_actors::Session::launch(opts).await.expect("launch");
        let (o, _) = run_task(&session, "hi").await;
        outcomes.push(o);
        session.shutdown().await;
    }
    assert_eq!(outcomes[0].exit_status, ExitStatus::Ok, "{}", outcomes[0].message);
    assert_eq!(outcomes[1].exit_status, ExitStatus::SpendCeilingReached);
    assert!(outcomes[1].message.starts_with("E-RUN-081"), "{}", outcomes[1].message);
    assert_eq!(stub.requests().len(), 1, "the second session's call was never sent");
}
