//! The guard in front of every door and the host API: both listen on loopback without
//! authentication (the door's `/control` has its token), so a web page the operator visits
//! must not be able to drive them.
//!
//! - `Host` must name a loopback address (`127.x.y.z`, `[::1]`, `localhost`, any port): a
//!   DNS-rebinding page arrives with its own host name and is refused (`403 forbidden_host`).
//! - `Origin`, when sent, must be an `http://` loopback origin: a cross-site `fetch` or form is
//!   refused (`403 cross_origin`).
//! - With [`Guard::json_posts`], a `POST` must say `Content-Type: application/json`, which a
//!   browser cannot send cross-site without a preflight that is never granted (`415`).
//! - A [`Guard::public`] listener (off loopback, so behind TLS and a required token) checks
//!   neither `Host` nor `Origin`: its clients use its public name, and a page that cannot read
//!   the token cannot act.

use axum::extract::Request;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

/// What the guard checks besides `Host` and `Origin`.
#[derive(Debug, Clone, Copy)]
pub struct Guard {
    /// Require `Content-Type: application/json` on `POST`.
    pub json_posts: bool,
    /// The listener is off loopback (TLS and a token required): any `Host` and `Origin`.
    pub public: bool,
}

/// Whether `host` (a `Host` header value or an origin's host, with or without a port) is a
/// loopback name.
pub fn loopback_host(host: &str) -> bool {
    let name = if let Some(rest) = host.strip_prefix('[') {
        rest.split(']').next().unwrap_or_default()
    } else {
        host.rsplit_once(':').map_or(host, |(h, port)| if port.chars().all(|c| c.is_ascii_digit()) { h } else { host })
    };
    match name.parse::<std::net::IpAddr>() {
        Ok(ip) => ip.is_loopback(),
        Err(_) => name.eq_ignore_ascii_case("localhost"),
    }
}

fn refuse(status: StatusCode, reason: &str, sentence: String) -> Response {
    closing((status, axum::Json(serde_json::json!({"error": format!("{reason}: {sentence}")}))).into_response())
}

/// A `401` with `body`, `WWW-Authenticate: Bearer` and `Connection: close`: the door's and the
/// host API's answer to a request without their token.
pub fn unauthorized(body: serde_json::Value) -> Response {
    let mut resp = (StatusCode::UNAUTHORIZED, axum::Json(body)).into_response();
    resp.headers_mut().insert(header::WWW_AUTHENTICATE, axum::http::HeaderValue::from_static("Bearer"));
    closing(resp)
}

/// `resp` with `Connection: close`, for a refusal sent before the request's body was read.
/// hyper closes such a connection after the answer (the unread body would be taken for the
/// next request); without the header a client puts the connection back in its pool, and its
/// next request on it can meet the close instead of an answer ("server disconnected").
pub fn closing(mut resp: Response) -> Response {
    resp.headers_mut().insert(header::CONNECTION, axum::http::HeaderValue::from_static("close"));
    resp
}

/// Check a request's headers; `Err` is the refusal to send.
pub fn check(guard: Guard, method: &Method, headers: &HeaderMap) -> Result<(), Box<Response>> {
    if guard.public {
        return json_post(guard, method, headers);
    }
    if let Some(host) = headers.get(header::HOST) {
        let host = host.to_str().unwrap_or_default();
        if !loopback_host(host) {
            return Err(Box::new(refuse(
                StatusCode::FORBIDDEN,
                "forbidden_host",
                format!(
                    "`Host: {host}` is not a loopback name; this server answers only requests addressed to 127.0.0.1, [::1] or localhost"
                ),
            )));
        }
    }
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let local = origin.strip_prefix("http://").is_some_and(|h| !h.contains('/') && loopback_host(h));
        if !local {
            return Err(Box::new(refuse(
                StatusCode::FORBIDDEN,
                "cross_origin",
                format!(
                    "requests from the web origin `{origin}` are refused; call this API from a local client, not a web page"
                ),
            )));
        }
    }
    json_post(guard, method, headers)
}

fn json_post(guard: Guard, method: &Method, headers: &HeaderMap) -> Result<(), Box<Response>> {
    if guard.json_posts && method == Method::POST {
        let ct = headers.get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or_default();
        if !ct.to_ascii_lowercase().starts_with("application/json") {
            return Err(Box::new(refuse(
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                format!("a POST here must be `Content-Type: application/json` (got `{ct}`); send `{{}}` as the body"),
            )));
        }
    }
    Ok(())
}

/// The middleware form of [`check`].
pub async fn middleware(guard: Guard, req: Request, next: Next) -> Response {
    match check(guard, req.method(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(refusal) => *refusal,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, v.parse().expect("value"));
        }
        h
    }

    #[test]
    fn loopback_names_with_and_without_ports() {
        for ok in ["127.0.0.1", "127.0.0.1:8080", "127.9.0.1:1", "[::1]:80", "[::1]", "localhost", "LOCALHOST:9"] {
            assert!(loopback_host(ok), "{ok}");
        }
        for bad in ["evil.example", "evil.example:80", "10.0.0.1:80", "0.0.0.0", "localhost.evil.example", "[::]:1"] {
            assert!(!loopback_host(bad), "{bad}");
        }
    }

    #[test]
    fn a_cross_site_form_post_and_a_rebinding_host_are_refused() {
        let g = Guard { json_posts: true, public: false };
        let form = headers(&[
            ("host", "127.0.0.1:4000"),
            ("origin", "https://evil.example"),
            ("content-type", "application/x-www-form-urlencoded"),
        ]);
        assert_eq!(check(g, &Method::POST, &form).expect_err("refused").status(), StatusCode::FORBIDDEN);
        let rebound = headers(&[("host", "evil.example:4000"), ("content-type", "application/json")]);
        assert_eq!(check(g, &Method::POST, &rebound).expect_err("refused").status(), StatusCode::FORBIDDEN);
        let plain = headers(&[("host", "127.0.0.1:4000"), ("content-type", "text/plain")]);
        assert_eq!(check(g, &Method::POST, &plain).expect_err("refused").status(), StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let null_origin =
            headers(&[("host", "127.0.0.1:4000"), ("origin", "null"), ("content-type", "application/json")]);
        assert!(check(g, &Method::POST, &null_origin).is_err());
        let local = headers(&[
            ("host", "127.0.0.1:4000"),
            ("origin", "http://127.0.0.1:4000"),
            ("content-type", "application/json"),
        ]);
        assert!(check(g, &Method::POST, &local).is_ok());
        assert!(check(g, &Method::GET, &headers(&[("host", "localhost:1")])).is_ok());
    }
}
