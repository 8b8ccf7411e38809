//! The door's handlers: each turns one request into messages to the session and its answer
//! into JSON or SSE.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use capsule_protocol::frame::{Frame, Published, TaskState};
use capsule_protocol::manifest::ArtifactRuntime;
use serde_json::{Value, json};
use std::sync::Arc;

use super::rpc::{self, SendParams, TaskIdParams, code};
use super::sse::{self, Until};
use crate::agent_loop::TaskRecord;
use crate::session::Session;

fn json_response(status: StatusCode, v: Value) -> Response {
    (status, Json(v)).into_response()
}

fn task_json(r: &TaskRecord) -> Value {
    json!({"id": r.id, "context_id": r.context_id, "status": {"state": r.state, "message": r.message, "response": r.response}, "final": r.state.is_final()})
}

/// `GET /.well-known/agent-card.json`.
pub async fn agent_card(
    State(s): State<Arc<Session>>,
    secure: Option<axum::Extension<crate::listener::Secure>>,
    headers: HeaderMap,
) -> Response {
    let m = &s.manifest;
    let host = headers.get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("127.0.0.1");
    let scheme = secure.map_or("http", |axum::Extension(s)| s.scheme());
    let skills: Vec<Value> = m
        .artifacts
        .iter()
        .filter(|a| a.runtime == ArtifactRuntime::Tool)
        .map(|a| json!({"id": a.name, "name": a.name, "description": format!("the `{}` tool", a.name), "tags": ["tool"]}))
        .collect();
    // The A2A endpoint, advertised for v1.0 clients (`supportedInterfaces`) and v0.3 clients
    // (`url`, `preferredTransport`, `protocolVersion`, `additionalInterfaces`). The host is the
    // one the client used (the local-origin guard has already refused a foreign one).
    let a2a = format!("{scheme}://{host}/a2a");
    let mut card = json!({
        "name": m.name, "version": m.version,
        "description": format!("Murmur capsule `{}` served by capsule-runtime", m.name),
        "supportedInterfaces": [
            {"url": a2a, "protocolBinding": "JSONRPC", "protocolVersion": "1.0"},
            {"url": a2a, "protocolBinding": "JSONRPC", "protocolVersion": "0.3"},
        ],
        "url": a2a, "preferredTransport": "JSONRPC", "protocolVersion": "0.3.0",
        "additionalInterfaces": [{"url": a2a, "transport": "JSONRPC"}],
        "murmurDoorUrl": format!("{scheme}://{host}/"),
        "capabilities": {"streaming": true, "pushNotifications": false},
        "defaultInputModes": ["text"], "defaultOutputModes": ["text"],
        "skills": skills, "session_id": s.session_id,
    });
    // The scheme a client must use (the card itself stays public).
    if s.door_auth.is_some() {
        card["securitySchemes"] = json!({"bearer": {"type": "http", "scheme": "bearer"}});
        card["security"] = json!([{"bearer": []}]);
    }
    json_response(StatusCode::OK, card)
}

/// `POST /`: JSON-RPC 2.0.
pub async fn rpc(State(s): State<Arc<Session>>, headers: HeaderMap, body: Bytes) -> Response {
    let req = match rpc::envelope(&headers, &body) {
        Ok(r) => r,
        Err((status, answer)) => return json_response(status, answer),
    };
    match req.method.as_str() {
        "message/send" => message_send(&s, &req).await,
        "message/stream" => message_stream(&s, &req).await,
        "stream/watch" => watch(&s, &headers).await,
        "tasks/get" | "tasks/cancel" => task_call(&s, &req).await,
        other => json_response(
            StatusCode::OK,
            rpc::err(
                &req.id,
                code::METHOD_NOT_FOUND,
                format!(
                    "unknown method `{other}`; methods: message/send, message/stream, stream/watch, tasks/get, tasks/cancel"
                ),
            ),
        ),
    }
}

/// The request's params, or the JSON-RPC `invalid params` answer (boxed: it is the rare path).
fn params<T: serde::de::DeserializeOwned>(req: &rpc::Request) -> Result<T, Box<Response>> {
    serde_json::from_value(req.params.clone()).map_err(|e| {
        Box::new(json_response(
            StatusCode::OK,
            rpc::err(&req.id, code::INVALID_PARAMS, format!("invalid params for {}: {e}", req.method)),
        ))
    })
}

async fn message_send(s: &Session, req: &rpc::Request) -> Response {
    let p: SendParams = match params(req) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let text = match p.text() {
        Ok(t) => t,
        Err(why) => return json_response(StatusCode::OK, rpc::err(&req.id, code::INVALID_PARAMS, why)),
    };
    // As Murmur's door does: while a task waits for a person (`input-required`), a message
    // answers it instead of starting a task, and the answer is the task, working again.
    if let Ok(Some(waiting)) = s.waiting_task().await
        && let Ok(Some(Ok(record))) = s.provide_input(&waiting, &text).await
    {
        return json_response(StatusCode::OK, rpc::ok(&req.id, task_json(&record)));
    }
    let (record, done) = match s.submit_from_door(&text, p.message.context_id.clone(), req.traceparent.clone()).await {
        Ok(x) => x,
        Err(e) => return json_response(StatusCode::OK, rpc::err(&req.id, code::INTERNAL, e.to_string())),
    };
    if record.state == TaskState::Rejected {
        return json_response(StatusCode::OK, rpc::ok(&req.id, task_json(&record)));
    }
    match done.await {
        Ok(o) => {
            // Answer from the outcome itself: the task's record may be gone if the session is
            // shutting down while this client waits.
            let r = record_of(o);
            json_response(StatusCode::OK, rpc::ok(&req.id, task_json(&r)))
        }
        Err(_) => json_response(
            StatusCode::OK,
            rpc::err(
                &req.id,
                code::INTERNAL,
                "the agent loop stopped before the task ended (it restarted or the session closed)",
            ),
        ),
    }
}

/// A task's record as its outcome tells it (`completed` carries the response).
pub(crate) fn record_of(o: crate::agent_loop::TaskOutcome) -> TaskRecord {
    let state = match o.exit_status {
        capsule_protocol::trace::ExitStatus::Ok => TaskState::Completed,
        capsule_protocol::trace::ExitStatus::Canceled => TaskState::Canceled,
        _ => TaskState::Failed,
    };
    let ok = state == TaskState::Completed;
    TaskRecord {
        id: o.task_id,
        context_id: o.context_id,
        state,
        message: if ok { "completed".into() } else { o.message.clone() },
        response: ok.then_some(o.message),
    }
}

async fn message_stream(s: &Session, req: &rpc::Request) -> Response {
    let p: SendParams = match params(req) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let text = match p.text() {
        Ok(t) => t,
        Err(why) => return sse::error_stream(why),
    };
    let Some(rx) = s.subscribe(None).await else {
        return sse::error_stream("the stream emitter is not running".into());
    };
    match s.submit_from_door(&text, p.message.context_id.clone(), req.traceparent.clone()).await {
        Ok((record, _done)) => {
            sse::response(sse::stream(Vec::new(), rx, Until::FinalOf(record.id.clone()), Some(record.id)))
        }
        Err(e) => sse::error_stream(e.to_string()),
    }
}

async fn watch(s: &Session, headers: &HeaderMap) -> Response {
    let after = match headers.get("last-event-id").map(|v| v.to_str().map(str::trim)) {
        None => None,
        Some(Ok(v)) => match v.parse::<u64>() {
            Ok(n) => Some(n),
            Err(_) => {
                return sse::error_stream(format!(
                    "Last-Event-ID `{v}` is not a frame id (a non-negative integer); reconnect without it or with the last id you received"
                ));
            }
        },
        Some(Err(_)) => return sse::error_stream("Last-Event-ID is not visible ASCII".into()),
    };
    let Some(rx) = s.subscribe(after).await else {
        return sse::error_stream("the stream emitter is not running".into());
    };
    let ack =
        Published::unnumbered(Frame::ConnectionAck { role: "observer".into(), conversation_mode: "single".into() });
    sse::response(sse::stream(vec![ack], rx, Until::Closed, None))
}

async fn task_call(s: &Session, req: &rpc::Request) -> Response {
    let p: TaskIdParams = match params(req) {
        Ok(p) => p,
        Err(r) => return *r,
    };
    let r = if req.method == "tasks/get" { s.get_task(&p.id).await } else { s.cancel(&p.id).await };
    match r {
        Ok(Some(rec)) => json_response(StatusCode::OK, rpc::ok(&req.id, task_json(&rec))),
        Ok(None) => json_response(
            StatusCode::OK,
            rpc::err(&req.id, code::TASK_NOT_FOUND, format!("no task `{}` in this session", p.id)),
        ),
        Err(e) => json_response(StatusCode::OK, rpc::err(&req.id, code::INTERNAL, e.to_string())),
    }
}
