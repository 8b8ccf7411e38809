//! The door: each capsule's HTTP listener on loopback (CONTRACT §10). It translates requests
//! into messages to the session's actors and frames into SSE; it holds no state of its own.
//!
//! - `GET /.well-known/agent-card.json`: who this capsule is.
//! - `POST /`: JSON-RPC 2.0 — `message/send`, `message/stream`, `stream/watch`, `tasks/get`,
//!   `tasks/cancel`. A body that is not JSON-RPC gets the JSON-RPC error code for what is wrong.
//! - `POST /a2a`: the A2A protocol (v1.0 and v0.3 JSON-RPC), see [`crate::a2a`].
//!
//! SSE frames are written exactly as `id:`, `event:`, one-line `data:`, blank line, with a
//! `:heartbeat` comment every [`HEARTBEAT`]. A reader that does not read never stalls the
//! others: each connection has its own bounded queue at the emitter.

pub(crate) mod methods;
pub(crate) mod rpc;
pub(crate) mod sse;

use axum::Router;
use axum::routing::{any, get, post};
use capsule_protocol::Code;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::session::Session;

/// Time between heartbeat comments on an SSE stream.
pub const HEARTBEAT: Duration = Duration::from_secs(15);

/// The router, without a socket (tests drive it directly).
pub fn app(session: Arc<Session>) -> Router {
    let guarded = session.clone();
    let guarded_a2a = session.clone();
    Router::new()
        .route("/.well-known/agent-card.json", get(methods::agent_card))
        .route(
            "/",
            post(methods::rpc)
                .layer(axum::middleware::from_fn(move |req, next| require_token(guarded.clone(), req, next))),
        )
        .route(
            "/a2a",
            post(crate::a2a::handle)
                .layer(axum::middleware::from_fn(move |req, next| require_token(guarded_a2a.clone(), req, next))),
        )
        .route("/control", any(crate::control::handle))
        .route("/control/{*rest}", any(crate::control::handle))
        .layer(axum::middleware::from_fn(|req, next| {
            crate::local_origin::middleware(crate::local_origin::Guard { json_posts: false }, req, next)
        }))
        .with_state(session)
}

/// With `network.authentication: bearer`, a JSON-RPC request (a stream included) must carry
/// `Authorization: Bearer <the session's door token>`; otherwise it is answered 401 with
/// `WWW-Authenticate: Bearer` before anything runs or any stream starts. The token is compared
/// by its hash in constant time and never traced or logged. The agent card stays public (it
/// declares the scheme); `/control` has its own token.
async fn require_token(
    s: Arc<Session>,
    req: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse;
    let Some(auth) = &s.door_auth else { return next.run(req).await };
    let presented = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some_and(|t| auth.key.verify(t)) {
        return next.run(req).await;
    }
    let body = serde_json::json!({"jsonrpc": "2.0", "id": null, "error": {"code": rpc::code::UNAUTHORIZED, "message": format!(
        "unauthorized: this door requires `Authorization: Bearer <token>` (network.authentication: bearer); the token is in the session folder's {} file",
        crate::session::DOOR_TOKEN_FILE
    )}});
    let mut resp = (axum::http::StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    resp.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Bearer"));
    resp
}

/// Why the door could not open.
#[derive(Debug, thiserror::Error)]
#[error("{code}: cannot listen on {addr}; choose another --port or --bind", code = Code::DoorBind)]
pub struct DoorError {
    /// The address.
    pub addr: SocketAddr,
    /// The OS error.
    #[source]
    pub source: std::io::Error,
}

/// A running door.
pub struct Door {
    /// The bound address.
    pub addr: SocketAddr,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Door {
    /// The URL clients use.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stop accepting connections.
    pub fn close(&self) {
        let _ = self.shutdown.send(true);
    }
}

/// Bind `addr` (port 0 for an OS-chosen port) and serve the door until [`Door::close`].
pub async fn serve(session: Arc<Session>, addr: SocketAddr) -> Result<Door, DoorError> {
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(|source| DoorError { addr, source })?;
    let bound = listener.local_addr().map_err(|source| DoorError { addr, source })?;
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let router = app(session);
    tokio::spawn(async move {
        let stop = async move {
            while !*rx.borrow() {
                if rx.changed().await.is_err() {
                    break;
                }
            }
        };
        crate::listener::serve(listener, router, stop, Default::default(), Default::default(), "door").await;
    });
    Ok(Door { addr: bound, shutdown: tx })
}
