//! `observability.otel_endpoint`: spans arrive over real OTLP/HTTP (protobuf) at a receiver
//! started here, decoded with the `opentelemetry-proto` types; the span tree is checked, and a
//! client's `traceparent` is linked from its task span and the task's own context goes upstream.

use crate::common::*;
use capsule_stub::Turn;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;
use std::sync::{Arc, Mutex};

/// Every span received, with its resource's `service.name`.
type Received = Arc<Mutex<Vec<(String, Span)>>>;

/// An OTLP/HTTP receiver on loopback: its base URL and what it received.
async fn receiver() -> (String, Received) {
    let got: Received = Arc::default();
    let store = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: axum::body::Bytes| {
            let store = store.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).expect("an OTLP protobuf export");
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| r.attributes.iter())
                        .find(|a| a.key == "service.name")
                        .and_then(|a| a.value.as_ref())
                        .map(|v| format!("{:?}", v.value))
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for span in ss.spans {
                            store.lock().expect("lock").push((service.clone(), span));
                        }
                    }
                }
                ([("content-type", "application/x-protobuf")], Vec::<u8>::new())
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let url = format!("http://{}", listener.local_addr().expect("addr"));
    tokio::spawn(async move { axum::serve(listener, app).await });
    (url, got)
}

fn named<'a>(spans: &'a [(String, Span)], name: &str) -> Vec<&'a Span> {
    spans.iter().filter(|(_, s)| s.name == name).map(|(_, s)| s).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_arrive_over_otlp_as_one_tree_linked_to_the_clients_traceparent() {
    let (otlp, got) = receiver().await;
    let stub = stub(vec![
        Turn::tool_call("files", json!({"op": "write", "path": "a.txt", "content": "hi"})),
        Turn::text("written"),
    ]);
    let extra = format!("observability:\n  otel_endpoint: '{otlp}'\n");
    let cap = anthropic_capsule(&stub.url(), &[("files", "{DIST}/tool-files.wasm")], &extra);
    let session = Arc::new(cap.launch().await.expect("launch"));
    let door = capsule_actors::door::serve(session.clone(), "127.0.0.1:0".parse().expect("addr")).await.expect("door");
    let (client_trace, client_span) = ("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7");
    let body = json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"messageId": "m1", "role": "user", "parts": [{"text": "write it"}]}}});
    let resp = reqwest::Client::new()
        .post(door.url())
        .header("content-type", "application/json")
        .header("traceparent", format!("00-{client_trace}-{client_span}-01"))
        .body(body.to_string())
        .send()
        .await
        .expect("send");
    let answer: serde_json::Value = resp.json().await.expect("json");
    assert_eq!(answer["result"]["status"]["state"], "completed", "{answer}");
    session.shutdown().await;
    eventually("the session span arrives", || {
        let got = got.clone();
        async move { !named(&got.lock().expect("lock"), "capsule.session").is_empty() }
    })
    .await;
    let spans = got.lock().expect("lock").clone();
    assert!(spans.iter().all(|(service, _)| service.contains("test-capsule")), "service.name is the capsule");
    let session_span = named(&spans, "capsule.session");
    assert_eq!(session_span.len(), 1);
    let root = session_span[0];
    assert!(root.parent_span_id.is_empty(), "the session span is the root");
    let task = named(&spans, "capsule.task");
    assert_eq!(task.len(), 1);
    let task = task[0];
    assert_eq!((&task.trace_id, &task.parent_span_id), (&root.trace_id, &root.span_id), "task under session");
    assert_eq!(task.links.len(), 1, "linked to the client's span");
    assert_eq!(hex::encode(&task.links[0].trace_id), client_trace);
    assert_eq!(hex::encode(&task.links[0].span_id), client_span);
    let inference = named(&spans, "capsule.inference");
    let tools = named(&spans, "capsule.tool_call");
    assert_eq!((inference.len(), tools.len()), (2, 1));
    for s in inference.iter().chain(tools.iter()) {
        assert_eq!((&s.trace_id, &s.parent_span_id), (&task.trace_id, &task.span_id), "{}", s.name);
        assert!(s.end_time_unix_nano >= s.start_time_unix_nano);
    }
    // The task's own context went upstream with each driver call.
    let expected = format!("00-{}-{}-01", hex::encode(&task.trace_id), hex::encode(&task.span_id));
    for r in stub.requests() {
        let tp = r.headers.iter().find(|(k, _)| k == "traceparent").map(|(_, v)| v.clone());
        assert_eq!(tp.as_deref(), Some(expected.as_str()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_otel_endpoint_is_refused_at_launch_and_eval_is_warned() {
    let cap = anthropic_capsule("http://127.0.0.1:9", &[], "observability:\n  otel_endpoint: collector:4318\n");
    let Err(e) = cap.launch().await else { panic!("launched with a bad otel_endpoint") };
    assert!(e.to_string().contains("observability.otel_endpoint") && e.to_string().contains("E-MAN-005"), "{e}");
    let cap = anthropic_capsule("http://127.0.0.1:9", &[], "observability:\n  eval: {suite: x}\n");
    let session = cap.launch().await.expect("eval is only warned");
    assert!(session.warnings.iter().any(|w| w.code.as_str() == "W-MAN-001" && w.at.contains("observability.eval")));
    session.shutdown().await;
}
