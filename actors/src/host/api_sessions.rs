//! The host API's routes for any session of the cluster (`POST /sessions/<id>`), whichever host
//! runs it:
//!
//! - the door's `stream/watch` request is answered here, from the session's frames subject on
//!   JetStream (after `Last-Event-ID`), so the stream goes on across a failover with no gap and
//!   no repeat;
//! - any other door request (`message/send`, `message/stream`, `tasks/get`, `tasks/cancel`) is
//!   forwarded to the door of the host that runs the session now, as the cluster's book names
//!   it, and its answer streamed back. A client that has a door token sends it as
//!   `X-Capsule-Door-Token` (the `Authorization` header carries the host API's token).
//!
//! While a session is between hosts (its lease expired, no survivor has claimed it yet) a
//! forwarded request is refused `503 moving`, to be tried again.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use super::HostHandle;

/// A refusal as JSON with its status.
fn refuse(status: StatusCode, error: String) -> Response {
    (status, Json(serde_json::json!({"error": error}))).into_response()
}

/// `POST /sessions/<id>`: a door request for any session of the cluster.
pub async fn session(
    State(host): State<HostHandle>,
    Path(session): Path<String>,
    headers: axum::http::HeaderMap,
    body: String,
) -> Response {
    let Some(c) = host.cluster() else {
        return refuse(
            StatusCode::NOT_FOUND,
            "not_clustered: this host is not in a cluster; send the request to the session's door".into(),
        );
    };
    let method =
        serde_json::from_str::<serde_json::Value>(&body).ok().and_then(|v| v["method"].as_str().map(str::to_string));
    match method.as_deref() {
        Some("stream/watch") => watch(c, &session, &headers).await,
        Some(_) => forward(c, &session, &headers, body).await,
        None => refuse(
            StatusCode::BAD_REQUEST,
            "bad_request: send a door request, e.g. {\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"stream/watch\"}".into(),
        ),
    }
}

/// The session's frames from JetStream, after `Last-Event-ID`.
async fn watch(c: &crate::cluster::ClusterHost, session: &str, headers: &axum::http::HeaderMap) -> Response {
    use capsule_protocol::frame::{Frame, Published};
    let after = headers.get("last-event-id").and_then(|v| v.to_str().ok()).and_then(|v| v.trim().parse::<u64>().ok());
    match crate::cluster::frames::follow(&c.js, session, after).await {
        Ok(rx) => {
            let role = "observer".into();
            let ack = Published::unnumbered(Frame::ConnectionAck { role, conversation_mode: "single".into() });
            crate::door::sse::response(crate::door::sse::stream(vec![ack], rx, crate::door::sse::Until::Closed, None))
        }
        Err(e) => crate::door::sse::error_stream(super::chain(&e)),
    }
}

/// Forward a door request to the door of the host that runs the session now.
async fn forward(
    c: &crate::cluster::ClusterHost,
    session: &str,
    headers: &axum::http::HeaderMap,
    body: String,
) -> Response {
    let entry = match c.sessions.get(&c.js, session).await {
        Ok(Some(e)) => e,
        Ok(None) => {
            return refuse(StatusCode::NOT_FOUND, format!("unknown_session: no live session {session} in the cluster"));
        }
        Err(e) => return refuse(StatusCode::SERVICE_UNAVAILABLE, format!("unavailable: {}", super::chain(&e))),
    };
    let held = matches!(c.leases.holder(session).await, Ok(Some(_)));
    let Some(door) = entry.door.filter(|_| held) else {
        return refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("moving: session {session} is between hosts (its host was lost); try again in a few seconds"),
        );
    };
    let mut request =
        reqwest::Client::new().post(&door).header(reqwest::header::CONTENT_TYPE, "application/json").body(body);
    for name in ["accept", "last-event-id", "traceparent"] {
        if let Some(v) = headers.get(name).and_then(|v| v.to_str().ok()) {
            request = request.header(name, v);
        }
    }
    if let Some(token) = headers.get("x-capsule-door-token").and_then(|v| v.to_str().ok()) {
        request = request.bearer_auth(token);
    }
    match request.send().await {
        Ok(answer) => {
            let status = StatusCode::from_u16(answer.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
            let kind =
                answer.headers().get(reqwest::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).map(str::to_string);
            let mut response = axum::body::Body::from_stream(answer.bytes_stream()).into_response();
            *response.status_mut() = status;
            if let Some(kind) = kind.and_then(|k| axum::http::HeaderValue::from_str(&k).ok()) {
                response.headers_mut().insert(axum::http::header::CONTENT_TYPE, kind);
            }
            response
        }
        Err(e) => refuse(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("moving: the door of session {session} ({door}) did not answer ({e}); try again in a few seconds"),
        ),
    }
}
