//! The HTTP side of the stub: listening, routing, turn selection and streaming.
//!
//! Routing is by path suffix: `…/messages` is Anthropic, `…/chat/completions` is OpenAI; a `POST`
//! there is a model request and takes the next script turn. `GET /_stub/requests` returns the
//! request log as JSON; any other request gets a JSON 404 (or 405 for a provider path with
//! another method). Every request except the log query itself is recorded.
//!
//! A raw turn's body is read when the stub starts and replayed as it is (see the `raw` module).
//!
//! Guarantees: streamed answers are a body stream yielding one frame per SSE event, giving the
//! runtime a chance to run between events, so clients see each event as it is produced; a cut
//! stream drops the connection (the body ends in an error, so HTTP/1.1 chunked framing is never
//! terminated) rather than ending it cleanly. An exhausted script is answered with HTTP 500, never
//! a panic.
//!
//! Deliberately not here: TLS, authentication checks, HTTP/2, or any pacing other than the
//! scripted `delay_ms` before the answer and `event_interval_ms` between streamed events.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use bytes::Bytes;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::body::event_body;
use crate::plan::Plan;
use crate::record::{Entry, Recorder};
use crate::{Provider, RecordedRequest, Script, StubError, anthropic, openai, raw};

/// Largest request body the stub reads.
const MAX_BODY_BYTES: usize = 64 * 1024 * 1024;

/// Model name echoed when the request names none.
const DEFAULT_MODEL: &str = "stub-model";

/// Starts stub servers. See [`Stub::start`].
#[derive(Debug, Clone, Copy)]
pub struct Stub;

/// A running stub. Dropping it shuts the server down, like [`StubHandle::shutdown`].
#[derive(Debug)]
pub struct StubHandle {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: watch::Sender<bool>,
    task: JoinHandle<std::io::Result<()>>,
}

/// What every request handler sees.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) script: Script,
    pub(crate) recorder: Recorder,
    /// The bytes of each raw turn, read at start, by turn index.
    pub(crate) raw_bodies: Vec<Option<Bytes>>,
}

impl Stub {
    /// Validates `script`, reads the bodies of its raw turns, binds `127.0.0.1` on a free port and
    /// serves on the current tokio runtime. Returns once the socket is listening, so requests may
    /// be sent right away.
    pub fn start(script: Script) -> Result<StubHandle, StubError> {
        Self::start_on(script, 0)
    }

    /// Like [`Stub::start`], on the given loopback port (0 picks a free one).
    pub fn start_on(script: Script, port: u16) -> Result<StubHandle, StubError> {
        script.validate()?;
        let raw_bodies = raw::load_bodies(&script)?;
        let runtime = tokio::runtime::Handle::try_current().map_err(|source| StubError::NoRuntime { source })?;
        let wanted = SocketAddr::from(([127, 0, 0, 1], port));
        let bind_error = |source| StubError::Bind { addr: wanted, source };
        let listener = std::net::TcpListener::bind(wanted).map_err(bind_error)?;
        listener.set_nonblocking(true).map_err(bind_error)?;
        let listener = tokio::net::TcpListener::from_std(listener).map_err(bind_error)?;
        let addr = listener.local_addr().map_err(bind_error)?;

        let shared = Arc::new(Shared { script, recorder: Recorder::default(), raw_bodies });
        let app =
            Router::new().route("/_stub/requests", get(list_requests)).fallback(answer).with_state(Arc::clone(&shared));
        let (stop, mut stopped) = watch::channel(false);
        let task = runtime.spawn(async move {
            // As a provider's server does: each SSE event leaves at once, and on a kept-alive
            // connection no write waits for the client's delayed ACK (Nagle: up to 40 ms).
            let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
                let _ = tcp.set_nodelay(true);
            });
            axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>())
                .with_graceful_shutdown(async move {
                    // A dropped sender also means stop.
                    let _ = stopped.wait_for(|stop| *stop).await;
                })
                .await
        });
        tracing::debug!(%addr, "stub provider listening");
        Ok(StubHandle { addr, shared, stop, task })
    }
}

impl StubHandle {
    /// The address the stub listens on.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The base URL, `http://127.0.0.1:PORT`, without a trailing slash.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A copy of every request received so far, in arrival order.
    pub fn requests(&self) -> Vec<RecordedRequest> {
        self.shared.recorder.snapshot()
    }

    /// Stops accepting connections; open connections finish their current answer. Does not wait.
    pub fn shutdown(&self) {
        self.stop.send_replace(true);
    }

    /// Waits until the server task ends (after [`StubHandle::shutdown`], or on a server failure).
    pub(crate) async fn stopped(&mut self) -> Result<(), StubError> {
        match (&mut self.task).await {
            Ok(result) => result.map_err(|source| StubError::Serve { source }),
            Err(join) => Err(StubError::Serve { source: std::io::Error::other(join) }),
        }
    }
}

impl Drop for StubHandle {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// `GET /_stub/requests`.
async fn list_requests(State(shared): State<Arc<Shared>>) -> Response {
    axum::Json(shared.recorder.snapshot()).into_response()
}

/// The provider a path belongs to, by suffix.
fn route(path: &str) -> Option<Provider> {
    if path.ends_with("/messages") {
        Some(Provider::Anthropic)
    } else if path.ends_with("/chat/completions") {
        Some(Provider::OpenAi)
    } else {
        None
    }
}

/// Every request but the log query: record it, then answer.
async fn answer(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    let arrived = Instant::now();
    let received_unix_ns = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_nanos());
    let client_port =
        request.extensions().get::<axum::extract::ConnectInfo<SocketAddr>>().map_or(0, |info| info.0.port());
    let (parts, body) = request.into_parts();
    let bytes = match axum::body::to_bytes(body, MAX_BODY_BYTES).await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::warn!(%error, "stub could not read a request body; recording it as empty");
            Bytes::new()
        }
    };
    let body: Value =
        serde_json::from_slice(&bytes).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()));
    let path = parts.uri.path().to_owned();
    let routed = route(&path);
    let provider = routed.filter(|_| parts.method == Method::POST);
    let headers = parts
        .headers
        .iter()
        .map(|(name, value)| {
            (name.as_str().to_ascii_lowercase(), String::from_utf8_lossy(value.as_bytes()).into_owned())
        })
        .collect();
    // What the answer needs of the request, read before the body moves into the log (a copy of
    // a long conversation per request would be the stub's largest cost).
    let asked = Asked::of(&body);
    let (entry, turn) = shared.recorder.begin(
        RecordedRequest {
            method: parts.method.to_string(),
            path: path.clone(),
            headers,
            body,
            received_unix_ns,
            stub_elapsed_ns: 0,
            event_sent_unix_ns: Vec::new(),
            turn: 0,
            client_port,
            provider,
        },
        arrived,
    );

    let Some(provider) = provider else {
        let (status, message) = match routed {
            Some(_) => {
                (StatusCode::METHOD_NOT_ALLOWED, format!("the stub answers only POST on {path}, not {}", parts.method))
            }
            None => (
                StatusCode::NOT_FOUND,
                format!("the stub has no provider at {path}; use a path ending in /v1/messages or /chat/completions"),
            ),
        };
        let kind = if routed.is_some() { "method_not_allowed" } else { "not_found_error" };
        let response = json_response(status, openai::error_body(kind, &message).to_string());
        shared.recorder.finish(entry);
        return response;
    };

    model_answer(&shared, provider, turn, asked, entry).await
}

/// The fields of a model request the answer depends on.
struct Asked {
    model: String,
    streaming: bool,
    include_usage: bool,
}

impl Asked {
    fn of(request: &Value) -> Asked {
        Asked {
            model: request.get("model").and_then(Value::as_str).unwrap_or(DEFAULT_MODEL).to_owned(),
            streaming: request.get("stream") == Some(&Value::Bool(true)),
            include_usage: request.pointer("/stream_options/include_usage").and_then(Value::as_bool).unwrap_or(false),
        }
    }
}

/// Answers a model request from its turn.
async fn model_answer(shared: &Arc<Shared>, provider: Provider, turn: usize, asked: Asked, entry: Entry) -> Response {
    let script = &shared.script;
    let error_body = |kind: &str, message: &str| match provider {
        Provider::Anthropic => anthropic::error_body(kind, message),
        Provider::OpenAi => openai::error_body(kind, message),
    };

    let Some(spec) = script.turns.get(turn) else {
        let message = format!(
            "stub script exhausted: this is model request {} but the script has {} turn(s)",
            turn + 1,
            script.turns.len()
        );
        tracing::warn!("{message}");
        let response = json_response(StatusCode::INTERNAL_SERVER_ERROR, error_body("api_error", &message).to_string());
        shared.recorder.finish(entry);
        return response;
    };

    if let Some(ms) = spec.delay_ms {
        tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
    }

    if let Some(replay) = &spec.raw {
        let body = shared.raw_bodies.get(turn).cloned().flatten().unwrap_or_default();
        return raw::answer(shared, entry, replay, body);
    }

    if let Some(error) = &spec.http_error {
        let status = StatusCode::from_u16(error.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        let mut response = json_response(status, error.body.clone());
        if let Some(secs) = error.retry_after {
            response.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        shared.recorder.finish(entry);
        return response;
    }

    if let Some(garbage) = &spec.garbage {
        let mut response = Response::new(Body::from(garbage.clone()));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        shared.recorder.finish(entry);
        return response;
    }

    let Asked { model, streaming, include_usage } = asked;
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_secs());
    let plan = Plan::new(script, turn, model, created);

    if streaming {
        let mut events = match provider {
            Provider::Anthropic => anthropic::stream(&plan),
            Provider::OpenAi => openai::stream(&plan, include_usage),
        };
        let cut = spec.cut_after_events.is_some();
        if let Some(after) = spec.cut_after_events {
            events.truncate(after.min(events.len().saturating_sub(1)));
        }
        let pause = spec.event_interval_ms.map(std::time::Duration::from_millis);
        let mut response = Response::new(event_body(Arc::clone(shared), entry, events, cut, pause));
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static("text/event-stream"));
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
        if plan.stream_error.is_some() {
            headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        return response;
    }

    if let Some(error) = &plan.stream_error {
        let response =
            json_response(StatusCode::INTERNAL_SERVER_ERROR, error_body(&error.kind, &error.message).to_string());
        shared.recorder.finish(entry);
        return response;
    }
    if spec.cut_after_events.is_some() {
        let mut response = Response::new(event_body(Arc::clone(shared), entry, Vec::new(), true, None));
        response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
        return response;
    }
    let body = match provider {
        Provider::Anthropic => anthropic::message(&plan),
        Provider::OpenAi => openai::completion(&plan),
    };
    let response = json_response(StatusCode::OK, body.to_string());
    shared.recorder.finish(entry);
    response
}

/// A complete JSON answer.
fn json_response(status: StatusCode, body: String) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
