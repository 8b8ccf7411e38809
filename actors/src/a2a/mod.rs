//! The A2A endpoint: `POST /a2a` on each capsule's door, the A2A protocol's JSON-RPC binding
//! in its v1.0 and v0.3 versions, so any A2A client can use a capsule. The Murmur door at `/`
//! is untouched; v0.3's `message/stream` would collide with the Murmur method of that name,
//! hence the separate path. The agent card advertises both (docs/protocol.md, "A2A").
//!
//! The version is told by the method name (they do not overlap), and the answer uses that
//! version's shapes ([`shape::Dialect`]). Every error is a JSON-RPC error with the code A2A
//! names for it; a body over [`MAX_BODY`] is refused before it is read in full.

mod events;
mod methods;
mod params;
mod shape;
mod stream;

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::Value;
use std::sync::Arc;

use crate::door::rpc::{self, code};
use crate::session::Session;
use methods::Answer;
pub use shape::Dialect;

/// The largest request body the endpoint reads.
pub const MAX_BODY: usize = 2 * 1024 * 1024;

/// The v1.0 methods.
pub const V1_METHODS: [&str; 6] =
    ["SendMessage", "SendStreamingMessage", "GetTask", "ListTasks", "CancelTask", "SubscribeToTask"];
/// The v0.3 methods.
pub const V03_METHODS: [&str; 5] = ["message/send", "message/stream", "tasks/get", "tasks/cancel", "tasks/resubscribe"];

fn answer(status: StatusCode, v: Value) -> Response {
    (status, Json(v)).into_response()
}

/// `POST /a2a`.
pub async fn handle(State(s): State<Arc<Session>>, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = match axum::body::to_bytes(body, MAX_BODY).await {
        Ok(b) => b,
        Err(_) => {
            let msg = format!("the request body is over {} MiB; send a smaller message", MAX_BODY / (1024 * 1024));
            return answer(StatusCode::PAYLOAD_TOO_LARGE, rpc::err(&Value::Null, code::INVALID_REQUEST, msg));
        }
    };
    let req = match rpc::envelope(&parts.headers, &body) {
        Ok(r) => r,
        Err((status, v)) => return answer(status, v),
    };
    let id = req.id.clone();
    let result = dispatch(&s, &req).await;
    match result {
        Answer::Result(v) => answer(StatusCode::OK, rpc::ok(&id, v)),
        Answer::Refused((c, msg)) => answer(StatusCode::OK, rpc::err(&id, c, msg)),
        Answer::Stream(r) => r,
    }
}

async fn dispatch(s: &Session, req: &rpc::Request) -> Answer {
    use Dialect::{V1, V03};
    let m = req.method.as_str();
    let p = &req.params;
    macro_rules! with {
        ($t:ty, |$x:ident| $body:expr) => {
            match params::parse::<$t>(m, p) {
                Ok($x) => $body,
                Err(r) => Answer::Refused(r),
            }
        };
    }
    match m {
        "SendMessage" => with!(params::Send, |x| methods::send(s, V1, &x.traced(req)).await),
        "message/send" => with!(params::Send, |x| methods::send(s, V03, &x.traced(req)).await),
        "SendStreamingMessage" => with!(params::Send, |x| methods::stream(s, V1, &x.traced(req), &req.id).await),
        "message/stream" => with!(params::Send, |x| methods::stream(s, V03, &x.traced(req), &req.id).await),
        "GetTask" => with!(params::TaskId, |x| methods::get(s, V1, &x).await),
        "tasks/get" => with!(params::TaskId, |x| methods::get(s, V03, &x).await),
        "ListTasks" => with!(params::List, |x| methods::list(s, V1, &x).await),
        "CancelTask" => with!(params::TaskId, |x| methods::cancel(s, V1, &x).await),
        "tasks/cancel" => with!(params::TaskId, |x| methods::cancel(s, V03, &x).await),
        "SubscribeToTask" => with!(params::TaskId, |x| methods::subscribe(s, V1, &x, &req.id).await),
        "tasks/resubscribe" => with!(params::TaskId, |x| methods::subscribe(s, V03, &x, &req.id).await),
        m if m.contains("PushNotificationConfig") || m.starts_with("tasks/pushNotificationConfig/") => Answer::Refused(
            (code::PUSH_NOT_SUPPORTED, "this agent sends no push notifications; stream or poll the task".into()),
        ),
        "GetExtendedAgentCard" | "agent/getAuthenticatedExtendedCard" => Answer::Refused((
            code::EXTENDED_CARD_NOT_CONFIGURED,
            "this agent has no extended card; GET /.well-known/agent-card.json".into(),
        )),
        other => Answer::Refused((
            code::METHOD_NOT_FOUND,
            format!(
                "unknown method `{other}`; A2A v1.0 methods: {}; v0.3 methods: {}",
                V1_METHODS.join(", "),
                V03_METHODS.join(", ")
            ),
        )),
    }
}
