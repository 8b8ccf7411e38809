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
    app_with(session, false)
}

/// The router; a `public` door (off loopback) does not check `Host` and `Origin`.
pub fn app_with(session: Arc<Session>, public: bool) -> Router {
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
        .layer(axum::middleware::from_fn(move |req, next| {
            crate::local_origin::middleware(crate::local_origin::Guard { json_posts: false, public }, req, next)
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
    crate::local_origin::unauthorized(body)
}

/// Why a door (or the host API) could not open.
#[derive(Debug, thiserror::Error)]
pub enum DoorError {
    /// The OS refused the address.
    #[error("{code}: cannot listen on {addr}; choose another --port or --bind", code = Code::DoorBind)]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// Off loopback without TLS, or a door without its token.
    #[error(
        "{code}: `{ip}` is not a loopback address, and a listener there needs {missing}: otherwise anyone who can reach it could submit tasks, read every frame and cancel work (fix: bind 127.0.0.1 or ::1, or configure {missing})",
        code = Code::DoorBind, ip = addr.ip()
    )]
    Exposed {
        /// The address.
        addr: SocketAddr,
        /// What it lacks.
        missing: &'static str,
    },
}

impl DoorError {
    /// A listener refused off loopback for lack of `missing`.
    pub fn exposed(addr: SocketAddr, missing: &'static str) -> DoorError {
        DoorError::Exposed { addr, missing }
    }

    /// Whether the address is taken (a fixed port still held by a closing listener).
    pub fn in_use(&self) -> bool {
        matches!(self, DoorError::Bind { source, .. } if source.kind() == std::io::ErrorKind::AddrInUse)
    }

    pub(crate) fn bind(addr: SocketAddr) -> impl FnOnce(std::io::Error) -> DoorError {
        move |source| DoorError::Bind { addr, source }
    }
}

/// How a door serves besides its address.
#[derive(Default, Clone)]
pub struct DoorOptions {
    /// TLS; required off loopback, together with `network.authentication: bearer`.
    pub tls: Option<tokio_rustls::TlsAcceptor>,
}

/// A running door.
pub struct Door {
    /// The bound address.
    pub addr: SocketAddr,
    /// Served over TLS.
    pub tls: bool,
    shutdown: tokio::sync::watch::Sender<bool>,
}

impl Door {
    /// The URL clients use.
    pub fn url(&self) -> String {
        format!("{}://{}", crate::listener::Secure(self.tls).scheme(), self.addr)
    }

    /// Stop accepting connections.
    pub fn close(&self) {
        let _ = self.shutdown.send(true);
    }
}

/// Bind `addr` (port 0 for an OS-chosen port) and serve the door until [`Door::close`].
pub async fn serve(session: Arc<Session>, addr: SocketAddr) -> Result<Door, DoorError> {
    serve_with(session, addr, DoorOptions::default()).await
}

/// [`serve`] with options. Off loopback the door needs TLS and its token
/// ([`crate::tls::exposure_allowed`]); without them the bind is refused before it is tried.
pub async fn serve_with(session: Arc<Session>, addr: SocketAddr, opts: DoorOptions) -> Result<Door, DoorError> {
    crate::tls::exposure_allowed(addr.ip(), opts.tls.is_some(), session.door_auth.is_some())
        .map_err(|missing| DoorError::exposed(addr, missing))?;
    let listener = tokio::net::TcpListener::bind(addr).await.map_err(DoorError::bind(addr))?;
    let bound = listener.local_addr().map_err(DoorError::bind(addr))?;
    let (tx, mut rx) = tokio::sync::watch::channel(false);
    let router = app_with(session, !addr.ip().is_loopback());
    let tls = opts.tls;
    let secure = tls.is_some();
    tokio::spawn(async move {
        let stop = async move {
            while !*rx.borrow() {
                if rx.changed().await.is_err() {
                    break;
                }
            }
        };
        crate::listener::serve(listener, router, stop, Default::default(), Default::default(), "door", tls).await;
    });
    Ok(Door { addr: bound, tls: secure, shutdown: tx })
}
