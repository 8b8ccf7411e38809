//! The host API: HTTP on loopback, turning each request into one message to the
//! [`HostSupervisor`](super::HostSupervisor) through a [`HostHandle`]. It holds no state.
//!
//! - `GET /capsules` → `[{name, state, session_id, restarts, url, error}]`, in start order. On
//!   a clustered host each entry also has `host`, and the list goes on with every other session
//!   of the cluster (`{name, state: running|unowned, session_id, url, host}`).
//! - `GET /capsules/<name>` → that entry.
//! - `POST /capsules/<name>/start|stop|restart` → the entry after the action (a restart
//!   answers once the new session's door is open).
//! - `POST /capsules` `{"path", "name"?}` (clustered hosts) → the capsule is stored in the
//!   cluster and placed on the least-loaded live host; that host's entry, with `host`.
//! - `POST /sessions/<session id>` (clustered hosts) with a door request: `stream/watch` is
//!   answered from JetStream, across a failover; any other request goes to the door of the host
//!   that runs the session now (`api_sessions.rs`). `capsule watch <api>/sessions/<id>
//!   --token-file <api token>` follows a session through any host.
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
    let entries = match host.list().await {
        Ok(entries) => entries,
        Err(e) => return Refusal(e).into_response(),
    };
    match host.cluster() {
        None => Json(entries).into_response(),
        Some(c) => Json(cluster_list(c, entries).await).into_response(),
    }
}

/// A clustered host's list: its own capsules (with `host`), then every other session the
/// cluster's book holds: its capsule, host, session and door, `running` while a host holds its
/// lease, `unowned` while it waits to be claimed after its host was lost.
async fn cluster_list(c: &crate::cluster::ClusterHost, mine: Vec<super::CapsuleEntry>) -> Vec<serde_json::Value> {
    let mut out: Vec<serde_json::Value> = mine
        .iter()
        .map(|e| {
            let mut v = serde_json::to_value(e).unwrap_or_default();
            v["host"] = c.name.clone().into();
            v
        })
        .collect();
    let local: std::collections::HashSet<&str> = mine.iter().filter_map(|e| e.session_id.as_deref()).collect();
    let booked = match c.sessions.list().await {
        Ok(b) => b,
        Err(e) => {
            tracing::warn!(error = %e, "the cluster's session book could not be read; listing this host's capsules only");
            return out;
        }
    };
    for (session, entry, _) in booked {
        if local.contains(session.as_str()) {
            continue;
        }
        let holder = c.leases.holder(&session).await.ok().flatten();
        let state = if holder.is_some() { "running" } else { "unowned" };
        let host = holder.map_or(entry.host, |h| h.host);
        out.push(serde_json::json!({
            "name": entry.capsule, "state": state, "session_id": session, "url": entry.door, "host": host,
        }));
    }
    out
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

/// `POST /capsules` `{"path": "<capsule folder or murmur.yaml>", "name"?: "<name>"}` on a
/// clustered host: the capsule is stored in the cluster and run by its least-loaded live host;
/// the answer is that host's entry for it, with `host`.
async fn place(State(host): State<HostHandle>, body: String) -> Response {
    let bad = |error: String| (StatusCode::BAD_REQUEST, Json(serde_json::json!({"error": error}))).into_response();
    let Some(c) = host.cluster() else {
        let error = "not_clustered: this host is not in a cluster; name capsules in its host file instead";
        return (StatusCode::NOT_FOUND, Json(serde_json::json!({"error": error}))).into_response();
    };
    let request: serde_json::Value = match serde_json::from_str(&body) {
        Ok(v) => v,
        Err(e) => {
            return bad(format!("bad_request: the body is not JSON ({e}); send {{\"path\": \"<capsule folder>\"}}"));
        }
    };
    let Some(path) = request["path"].as_str().map(std::path::PathBuf::from) else {
        return bad("bad_request: `path` (a capsule folder or its murmur.yaml, on this host) is required".into());
    };
    let folder =
        if path.is_dir() { path.clone() } else { path.parent().map(std::path::Path::to_path_buf).unwrap_or_default() };
    let name = match request["name"].as_str() {
        Some(n) => n.to_string(),
        None => folder.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default(),
    };
    if !capsule_protocol::host_file::valid_name(&name) {
        return bad(format!(
            "bad_request: `{name}` cannot name a capsule (1–100 of A–Z a–z 0–9 . _ -, not starting with .)"
        ));
    }
    match super::placement::place(c, host.actor(), &path, name).await {
        Ok((entry, on)) => {
            let mut v = serde_json::to_value(entry).unwrap_or_default();
            v["host"] = on.into();
            Json(v).into_response()
        }
        Err(e) => {
            let status = if matches!(e, super::placement::PlaceError::Cluster(ref c) if c.code() == capsule_protocol::Code::ClusterBadCapsule)
            {
                StatusCode::UNPROCESSABLE_ENTITY
            } else {
                StatusCode::SERVICE_UNAVAILABLE
            };
            (status, Json(serde_json::json!({"error": format!("not_placed: {}", super::chain(&e))}))).into_response()
        }
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
    crate::local_origin::unauthorized(body)
}

/// The router, without a socket (tests drive it directly). `key` checks the API token.
pub fn app(host: HostHandle, key: TokenKey, public: bool) -> Router {
    let key = Arc::new(key);
    Router::new()
        .route("/capsules", get(list).post(place))
        .route("/capsules/{name}", get(one))
        .route("/capsules/{name}/{action}", post(act))
        .route("/sessions/{session}", post(super::api_sessions::session))
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
