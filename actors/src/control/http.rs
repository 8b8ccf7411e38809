//! `/control*` on the door, in three steps: [`extract`] checks the request in the contract's
//! order, first refusal wins (no surface → token → path, name, method → loopback for secret
//! writes → length → content type and value) and yields an [`Action`]; [`act`] carries it out
//! through the session, whose actors decide the rest (`undeclared_driver`, `invalid_value`,
//! `credential_unresolvable`, `in_use`). Every refusal, from either step, is answered and
//! traced by [`refuse`]. No secret value ever appears in an answer or a trace line.

use axum::Json;
use axum::body::{Body, to_bytes};
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use capsule_protocol::trace::TraceKind;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;

use super::{ControlError, MAX_SECRET_BODY, MAX_SETTING_BODY, Principal};
use crate::session::Session;

/// Bytes of a refused request's path kept in the trace.
pub const TRACED_PATH_BYTES: usize = 128;

/// What a request asks, once every check before the actors passed.
#[derive(Debug)]
enum Action {
    View,
    Set { name: String, value: Value },
    Inject { name: String, value: String },
    Forget { name: String },
}

/// Every `/control*` request.
pub async fn handle(State(s): State<Arc<Session>>, req: Request<Body>) -> Response {
    let (method, path) = (req.method().clone(), req.uri().path().to_string());
    let answered = match extract(&s, req).await {
        Ok(action) => act(&s, action).await,
        Err(e) => Err(e),
    };
    answered.unwrap_or_else(|e| refuse(&s, &method, &path, &e))
}

/// The path's target.
enum Target {
    Root,
    Setting(String),
    Secret(String),
}

fn target(path: &str) -> Result<Target, ControlError> {
    let rest = path.trim_end_matches('/').strip_prefix("/control");
    let unknown = || ControlError::UnknownPath { path: path.to_string() };
    match rest {
        Some("") => Ok(Target::Root),
        Some(rest) => {
            let one = |p: &str| rest.strip_prefix(p).filter(|n| !n.is_empty() && !n.contains('/')).map(str::to_string);
            one("/settings/").map(Target::Setting).or_else(|| one("/secrets/").map(Target::Secret)).ok_or_else(unknown)
        }
        None => Err(unknown()),
    }
}

/// Check the request in the contract's order and say what it asks.
async fn extract(s: &Session, req: Request<Body>) -> Result<Action, ControlError> {
    let control = s.control.as_ref().ok_or(ControlError::NoSurface)?;
    let presented =
        req.headers().get(header::AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    if !presented.is_some_and(|t| control.key.verify(t)) {
        return Err(ControlError::Unauthorized);
    }
    let method = req.method().clone();
    let not_allowed = |allowed| ControlError::MethodNotAllowed { method: method.to_string(), allowed };
    let target = target(req.uri().path())?;
    match &target {
        Target::Root if method != Method::GET => return Err(not_allowed("GET")),
        Target::Root => {}
        Target::Setting(n) if !control.settings.contains(n) => {
            return Err(ControlError::UndeclaredSetting { name: n.clone(), declared: control.settings.clone() });
        }
        Target::Setting(_) if method != Method::PUT => return Err(not_allowed("PUT")),
        Target::Secret(n) if !control.secrets.contains(n) => {
            return Err(ControlError::UndeclaredSecret { name: n.clone(), declared: control.secrets.clone() });
        }
        Target::Secret(_) if method != Method::PUT && method != Method::DELETE => {
            return Err(not_allowed("PUT, DELETE"));
        }
        Target::Secret(_) => {
            let peer = req.extensions().get::<ConnectInfo<SocketAddr>>().map(|c| c.0);
            if !peer.is_some_and(|p| p.ip().is_loopback()) {
                return Err(ControlError::NotLoopback);
            }
        }
        Target::Setting(_) => {}
    }
    let limit = if matches!(target, Target::Secret(_)) { MAX_SECRET_BODY } else { MAX_SETTING_BODY };
    let content_type =
        req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("").to_ascii_lowercase();
    let body = match to_bytes(req.into_body(), limit + 1).await {
        Ok(b) if b.len() <= limit => b,
        _ => return Err(ControlError::TooLarge { limit }),
    };
    match target {
        Target::Root => Ok(Action::View),
        Target::Secret(name) if method == Method::DELETE => Ok(Action::Forget { name }),
        Target::Secret(name) => {
            if body.is_empty() {
                return Err(ControlError::MissingBody { what: "send the secret's value as the body" });
            }
            let value = String::from_utf8(body.to_vec()).map_err(|_| ControlError::InvalidValue {
                why: "a secret value is visible ASCII and space only".into(),
            })?;
            Ok(Action::Inject { name, value })
        }
        Target::Setting(name) => {
            if !content_type.starts_with("application/json") {
                return Err(ControlError::UnsupportedMediaType);
            }
            if body.is_empty() {
                return Err(ControlError::MissingBody { what: "send {\"value\": …}" });
            }
            match serde_json::from_slice::<Value>(&body) {
                Ok(Value::Object(mut o)) => match o.remove("value") {
                    Some(value) => Ok(Action::Set { name, value }),
                    None => Err(ControlError::MissingBody { what: "the body has no `value`; send {\"value\": …}" }),
                },
                _ => Err(ControlError::InvalidValue {
                    why: "the body is not a JSON object; send {\"value\": …}".into(),
                }),
            }
        }
    }
}

/// Carry the action out through the session.
async fn act(s: &Session, action: Action) -> Result<Response, ControlError> {
    let ok = |v: Value| (StatusCode::OK, Json(v)).into_response();
    match action {
        Action::View => s.control_view().await.map(ok),
        Action::Set { name, value } => {
            let change = s.set_setting(&name, value, Principal::Operator).await?;
            Ok((StatusCode::OK, Json(change)).into_response())
        }
        Action::Inject { name, value } => {
            let replaced = s.set_secret(&name, &value).await?;
            Ok(ok(json!({"name": name, "set": true, "replaced": replaced})))
        }
        Action::Forget { name } => {
            s.forget_secret(&name).await?;
            Ok(ok(json!({"name": name, "set": false})))
        }
    }
}

/// Answer a refusal with its status, its headers, `Connection: close` and
/// `{"error": "<reason>: <sentence>"}`, and trace it: the path cut to [`TRACED_PATH_BYTES`], at
/// most [`crate::session::REFUSALS_TRACED_PER_SECOND`] lines a second (the rest counted into the
/// next line).
fn refuse(s: &Session, method: &Method, path: &str, e: &ControlError) -> Response {
    // A capsule without a surface has nothing to trace about it.
    if *e != ControlError::NoSurface
        && let Some(suppressed) = s.refusal_budget()
    {
        let mut cut = path.len().min(TRACED_PATH_BYTES);
        while !path.is_char_boundary(cut) {
            cut -= 1;
        }
        let shown = if cut < path.len() { format!("{}…", &path[..cut]) } else { path.to_string() };
        let mut fields = e.trace_fields();
        fields["method"] = json!(method.as_str());
        fields["path"] = json!(shown);
        fields["path_bytes"] = json!(path.len());
        fields["principal"] = json!(Principal::Operator);
        fields["token_id"] = json!(s.control.as_ref().map(|c| c.key.id()));
        fields["suppressed_before"] = json!(suppressed);
        s.trace_event(TraceKind::ControlRefused, fields);
    }
    let status = StatusCode::from_u16(e.status()).unwrap_or(StatusCode::BAD_REQUEST);
    let mut resp = (status, Json(json!({"error": format!("{}: {e}", e.reason())}))).into_response();
    for (name, value) in e.headers() {
        resp.headers_mut().insert(HeaderName::from_static(name), HeaderValue::from_static(value));
    }
    // Most refusals come before the body is read (the token, the path, the method).
    crate::local_origin::closing(resp)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_map_to_one_target_or_an_unknown_path() {
        assert!(matches!(target("/control"), Ok(Target::Root)));
        assert!(matches!(target("/control/"), Ok(Target::Root)));
        assert!(
            matches!(target("/control/settings/inference.driver"), Ok(Target::Setting(n)) if n == "inference.driver")
        );
        assert!(matches!(target("/control/secrets/KEY"), Ok(Target::Secret(n)) if n == "KEY"));
        for bad in ["/control/settings/", "/control/secrets/a/b", "/control/other", "/controlx", "/control/settings"] {
            assert!(matches!(target(bad), Err(ControlError::UnknownPath { .. })), "{bad} is not a control path");
        }
    }

    #[test]
    fn every_refusal_knows_its_status_reason_and_headers() {
        let e = ControlError::MethodNotAllowed { method: "POST".into(), allowed: "PUT, DELETE" };
        assert_eq!((e.status(), e.reason(), e.headers()), (405, "method_not_allowed", vec![("allow", "PUT, DELETE")]));
        let e = ControlError::Unauthorized;
        assert_eq!((e.status(), e.headers()), (401, vec![("www-authenticate", "Bearer")]));
        let e = ControlError::InUse { name: "K".into() };
        assert_eq!((e.status(), e.reason(), e.headers().len()), (409, "in_use", 0));
    }
}
