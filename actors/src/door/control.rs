//! `/control*` on the door (CONTRACT §7): the operator's surface for settings and secrets.
//!
//! Refusals are checked in the contract's order, first refusal wins: no surface (404) → token
//! (401 + `WWW-Authenticate: Bearer`) → path, name, method (404 `unknown_path`,
//! `undeclared_setting`, `undeclared_secret`; 405 + `allow`) → secret writes only from loopback
//! (403 `not_loopback`) → length (413) → content type (415) and value (422 `missing_body`,
//! `invalid_value`, `undeclared_driver`) → 409 `credential_unresolvable` / `in_use`. Each body
//! is `{"error": "<reason>: <one sentence>"}`; no secret value ever appears in an answer.

use axum::Json;
use axum::body::{Body, to_bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use capsule_protocol::trace::TraceKind;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;

use crate::control::{ControlRefusal, MAX_SECRET_BODY, MAX_SETTING_BODY, Principal};
use crate::session::Session;

/// The refusal as an answer: its status and `{"error": "<reason>: <sentence>"}`.
fn answer(r: &ControlRefusal) -> Response {
    let status = StatusCode::from_u16(r.status).unwrap_or(StatusCode::BAD_REQUEST);
    (status, Json(json!({"error": format!("{}: {}", r.reason, r.error)}))).into_response()
}

/// Bytes of a refused request's path kept in the trace.
pub const TRACED_PATH_BYTES: usize = 128;

/// A refusal this layer decides: traced here (the path cut to [`TRACED_PATH_BYTES`], and at
/// most [`crate::session::REFUSALS_TRACED_PER_SECOND`] a second; the rest counted into the next
/// line), then answered.
fn refuse(s: &Session, method: &Method, path: &str, r: ControlRefusal) -> Response {
    if let Some(suppressed) = s.refusal_budget() {
        let mut cut = path.len().min(TRACED_PATH_BYTES);
        while !path.is_char_boundary(cut) {
            cut -= 1;
        }
        let shown = if cut < path.len() { format!("{}…", &path[..cut]) } else { path.to_string() };
        s.trace_event(TraceKind::ControlRefused, json!({"method": method.as_str(), "path": shown, "path_bytes": path.len(), "status": r.status, "reason": r.reason, "token_id": s.control.as_ref().map(|c| c.key.id()), "suppressed_before": suppressed}));
    }
    let mut resp = answer(&r);
    match r.reason {
        "unauthorized" => {
            resp.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        "method_not_allowed" => {
            if let Ok(v) =
                HeaderValue::from_str(r.error.split("allowed: ").nth(1).unwrap_or("GET").trim_end_matches('.'))
            {
                resp.headers_mut().insert(header::ALLOW, v);
            }
        }
        _ => {}
    }
    resp
}

enum Target {
    Root,
    Setting(String),
    Secret(String),
}

/// Every `/control*` request.
pub async fn handle(State(s): State<Arc<Session>>, req: Request<Body>) -> Response {
    let method = req.method().clone();
    let path = req.uri().path().to_string();
    let Some(control) = s.control.clone() else {
        return (
            StatusCode::NOT_FOUND,
            Json(json!({"error": "unknown_path: this capsule declares no control surface"})),
        )
            .into_response();
    };
    let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
    let token = req
        .headers()
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string);
    if !token.as_deref().is_some_and(|t| control.key.verify(t)) {
        return refuse(
            &s,
            &method,
            &path,
            ControlRefusal::new(
                401,
                "unauthorized",
                "send `Authorization: Bearer <token>` with the session's control token (its file is named in the ready line)",
            ),
        );
    }
    let target = match path.trim_end_matches('/').strip_prefix("/control").unwrap_or("?") {
        "" => Target::Root,
        rest => match rest.strip_prefix("/settings/").or_else(|| rest.strip_prefix("/secrets/").map(|_| "")) {
            Some(name) if rest.starts_with("/settings/") && !name.contains('/') => Target::Setting(name.to_string()),
            _ => match rest.strip_prefix("/secrets/") {
                Some(name) if !name.contains('/') && !name.is_empty() => Target::Secret(name.to_string()),
                _ => {
                    return refuse(
                        &s,
                        &method,
                        &path,
                        ControlRefusal::new(
                            404,
                            "unknown_path",
                            format!(
                                "`{path}` is not a control path; use /control, /control/settings/<name> or /control/secrets/<name>"
                            ),
                        ),
                    );
                }
            },
        },
    };
    let not_allowed = |allowed: &str| {
        ControlRefusal::new(405, "method_not_allowed", format!("{method} is not allowed here; allowed: {allowed}"))
    };
    match (&target, &method) {
        (Target::Root, &Method::GET) => {}
        (Target::Root, _) => return refuse(&s, &method, &path, not_allowed("GET")),
        (Target::Setting(n), m) => {
            if !control.settings.contains(n) {
                return refuse(
                    &s,
                    &method,
                    &path,
                    ControlRefusal::new(
                        404,
                        "undeclared_setting",
                        format!(
                            "`{n}` is not declared under control.settings; declared: {}",
                            control.settings.join(", ")
                        ),
                    ),
                );
            }
            if m != Method::PUT {
                return refuse(&s, &method, &path, not_allowed("PUT"));
            }
        }
        (Target::Secret(n), m) => {
            if !control.secrets.contains(n) {
                return refuse(
                    &s,
                    &method,
                    &path,
                    ControlRefusal::new(
                        404,
                        "undeclared_secret",
                        format!(
                            "`{n}` is not declared under control.secrets; declared: {}",
                            control.secrets.join(", ")
                        ),
                    ),
                );
            }
            if m != Method::PUT && m != Method::DELETE {
                return refuse(&s, &method, &path, not_allowed("PUT, DELETE"));
            }
            if !peer.is_some_and(|p| p.ip().is_loopback()) {
                return refuse(
                    &s,
                    &method,
                    &path,
                    ControlRefusal::new(
                        403,
                        "not_loopback",
                        "secrets are written only from loopback; run the request on the capsule's host",
                    ),
                );
            }
        }
    }
    let limit = if matches!(target, Target::Secret(_)) { MAX_SECRET_BODY } else { MAX_SETTING_BODY };
    let content_type =
        req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let body = match to_bytes(req.into_body(), limit + 1).await {
        Ok(b) if b.len() <= limit => b,
        _ => {
            return refuse(
                &s,
                &method,
                &path,
                ControlRefusal::new(413, "too_large", format!("the body is over {limit} bytes")),
            );
        }
    };
    match target {
        Target::Root => match s.control_view().await {
            Ok(v) => (StatusCode::OK, Json(v)).into_response(),
            Err(e) => refuse(&s, &method, &path, ControlRefusal::new(503, "unavailable", e.to_string())),
        },
        Target::Setting(name) => {
            if !content_type.starts_with("application/json") {
                return refuse(
                    &s,
                    &method,
                    &path,
                    ControlRefusal::new(
                        415,
                        "unsupported_media_type",
                        "send the setting as `Content-Type: application/json` with {\"value\": …}",
                    ),
                );
            }
            if body.is_empty() {
                return refuse(&s, &method, &path, ControlRefusal::new(422, "missing_body", "send {\"value\": …}"));
            }
            let value = match serde_json::from_slice::<Value>(&body) {
                Ok(Value::Object(mut o)) => match o.remove("value") {
                    Some(v) => v,
                    None => {
                        return refuse(
                            &s,
                            &method,
                            &path,
                            ControlRefusal::new(422, "missing_body", "the body has no `value`; send {\"value\": …}"),
                        );
                    }
                },
                _ => {
                    return refuse(
                        &s,
                        &method,
                        &path,
                        ControlRefusal::new(422, "invalid_value", "the body is not a JSON object; send {\"value\": …}"),
                    );
                }
            };
            match s.set_setting(&name, value, Principal::Operator).await {
                Ok(change) => (StatusCode::OK, Json(change)).into_response(),
                // The loop already traced its refusal.
                Err(r) => answer(&r),
            }
        }
        Target::Secret(name) => {
            if method == Method::DELETE {
                return match s.forget_secret(&name).await {
                    Ok(()) => (StatusCode::OK, Json(json!({"name": name, "set": false}))).into_response(),
                    // The session already traced its refusal.
                    Err(r) => answer(&r),
                };
            }
            if body.is_empty() {
                return refuse(
                    &s,
                    &method,
                    &path,
                    ControlRefusal::new(422, "missing_body", "send the secret's value as the body"),
                );
            }
            let Ok(value) = std::str::from_utf8(&body) else {
                return refuse(
                    &s,
                    &method,
                    &path,
                    ControlRefusal::new(422, "invalid_value", "a secret value is visible ASCII and space only"),
                );
            };
            match s.set_secret(&name, value).await {
                Ok(replaced) => {
                    (StatusCode::OK, Json(json!({"name": name, "set": true, "replaced": replaced}))).into_response()
                }
                Err(r) => refuse(&s, &method, &path, r),
            }
        }
    }
}
