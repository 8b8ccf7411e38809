//! The host API: HTTP on loopback, turning each request into one message to the
//! [`HostSupervisor`](super::HostSupervisor) through a [`HostHandle`]. It holds no state.
//!
//! - `GET /capsules` → `[{name, state, session_id, restarts, url, error}]`, in start order.
//! - `GET /capsules/<name>` → that entry.
//! - `POST /capsules/<name>/start|stop|restart` → the entry after the action (a restart
//!   answers once the new session's door is open).
//!
//! A refusal is `{"error": "<reason>: <sentence>"}` with its status: 404 for an unknown capsule
//! or action, 503 while shutting down or when the host does not answer, 401 (with
//! `WWW-Authenticate: Bearer`) without the host's API token. Every request, reads included,
//! needs `Authorization: Bearer <token>`: the token is minted at each host start into a `0600`
//! file (`capsule host` names it in its ready line) and compared by hash in constant time. The
//! API listens on loopback only (the host file refuses another bind), and
//! [`crate::local_origin`] refuses what a web page could send: a foreign `Host` or `Origin`,
//! or a `POST` that is not `application/json` (send `{}`).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use std::net::SocketAddr;
use std::sync::Arc;

use super::{Action, HostError, HostHandle};
use crate::control::TokenKey;
use crate::door::DoorError;

/// A refusal as the API writes it.
struct Refusal(HostError);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let status = StatusCode::from_u16(self.0.status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, Json(serde_json::json!({"error": self.0.to_string()}))).into_response()
    }
}

async fn list(State(host): State<HostHandle>) -> Response {
    match host.list().await {
        Ok(entries) => Json(entries).into_response(),
        Err(e) => Refusal(e).into_response(),
    }
}

async fn one(State(host): State<HostHandle>, Path(name): Path<String>) -> Response {
    match host.get(&name).await {
        Ok(entry) => Json(entry).into_response(),
        Err(e) => Refusal(e).into_response(),
    }
}

async fn act(State(host): State<HostHandle>, Path((name, action)): Path<(String, String)>) -> Response {
    let Some(action) = Action::parse(&action) else { return Refusal(HostError::UnknownAction(action)).into_response() };
    match host.act(&name, action).await {
        Ok(entry) => Json(entry).into_response(),
        Err(e) => Refusal(e).into_response(),
    }
}

/// Every request needs the host's API token; the answer to one without it says where it is.
async fn require_token(key: Arc<TokenKey>, req: axum::extract::Request, next: axum::middleware::Next) -> Response {
    let presented = req
        .headers()
        .get(axum::http::header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "));
    if presented.is_some_and(|t| key.verify(t)) {
        return next.run(req).await;
    }
    let body = serde_json::json!({"error": "unauthorized: the host API requires `Authorization: Bearer <token>`; the token is in the file `capsule host` names as token_file in its ready line"});
    let mut resp = (StatusCode::UNAUTHORIZED, Json(body)).into_response();
    resp.headers_mut().insert(axum::http::header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Bearer"));
    resp
}

/// The router, without a socket (tests drive it directly). `key` checks the API token.
pub fn app(host: HostHandle, key: TokenKey, public: bool) -> Router {
    let key = Arc::new(key);
    Router::new()
        .route("/capsules", get(list))
        .route("/capsules/{name}", get(one))
        .route("/capsules/{name}/{action}", post(act))
        .layer(axum::middleware::from_fn(move |req, next| require_token(key.clone(), req, next)))
        .layer(axum::middleware::from_fn(move |req, next| {
            crate::local_origin::middleware(crate::local_origin::Guard { json_posts: true, public }, req, next)
        }))
        .with_state(host)
}

/// A listening host API.
pub struct HostApi {
    /// The bound address.
    pub addr: SocketAddr,
    /// Served over TLS.
    pub tls: bool,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl HostApi {
    /// The URL clients use.
    pub fn url(&self) -> String {
        format!("{}://{}", crate::listener::Secure(self.tls).scheme(), self.addr)
    }

    /// Stop accepting connections.
    pub fn close(&self) {
        let _ = self.shutdown.send(true);
    }
}

/// Bind `addr` (port 0 for an OS-chosen port) and serve the API until [`HostApi::close`];
/// requests must carry the token `key` was minted with. Off loopback, `tls` is required
/// ([`crate::tls::exposure_allowed`]); without it the bind is refused.
pub async fn serve(
    host: HostHandle,
    addr: SocketAddr,
    key: TokenKey,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Result<HostApi, DoorError> {
    crate::tls::exposure_allowed(addr.ip(), tls.is_some(), true)
        .map_err(|missing| DoorError::exposed(addr, missing))?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(DoorError::bind(addr))?;
    let bound = listener.local_addr().map_err(DoorError::bind(addr))?;
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let router = app(host, key, !addr.ip().is_loopback());
    let secure = tls.is_some();
    tokio::spawn(async move {
        let stop = async move {
            while !*rx.borrow() {
                if rx.changed().await.is_err() {
                    break;
                }
            }
        };
        crate::listener::serve(listener, router, stop, Default::default(), Default::default(), "host API", tls).await;
    });
    Ok(HostApi { addr: bound, tls: secure, shutdown: tx })
}
