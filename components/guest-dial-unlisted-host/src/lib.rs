//! Adversarial guest `guest-dial-unlisted-host` (world `tool`).
//!
//! What it tries: a `wasi:http` GET to the URL in `tool-input.data`
//! (default `http://127.0.0.1:9/`), normally a host that is not in the
//! capsule's `network.allow`.
//!
//! What the host must do: refuse the request in its outgoing-request policy
//! (the guest sees an `ErrorCode`, typically `HttpRequestDenied`) without
//! opening a connection. The result is `passed` with the HTTP status code in
//! `data` if a response came back, otherwise `failed` with the `Debug` text of
//! the error code in `summary` (and in `data`).
//!
//! It deliberately reads no response body and follows no redirect.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use wasip2::http::outgoing_handler;
use wasip2::http::types::{Fields, Method, OutgoingRequest, Scheme};

const DEFAULT_URL: &str = "http://127.0.0.1:9/";

struct Component;

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        let url = input
            .data
            .map(|d| d.trim().to_string())
            .filter(|d| !d.is_empty())
            .unwrap_or_else(|| DEFAULT_URL.to_string());
        match get(&url) {
            Ok(status) => result(Status::Passed, format!("{url}: HTTP {status}"), status.to_string()),
            Err(e) => result(Status::Failed, format!("{url}: {e}"), e),
        }
    }
}

/// GET `url`; the response status, or the error as text.
fn get(url: &str) -> Result<u16, String> {
    let (scheme, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (Scheme::Https, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (Scheme::Http, rest)
    } else {
        return Err(format!("not an http(s) URL: {url}"));
    };
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let request = OutgoingRequest::new(Fields::new());
    let set = request.set_method(&Method::Get).is_ok()
        && request.set_scheme(Some(&scheme)).is_ok()
        && request.set_authority(Some(authority)).is_ok()
        && request.set_path_with_query(Some(path)).is_ok();
    if !set {
        return Err(format!("the host refused the request line for {url}"));
    }
    let future = outgoing_handler::handle(request, None).map_err(|code| format!("{code:?}"))?;
    future.subscribe().block();
    match future.get() {
        Some(Ok(Ok(response))) => Ok(response.status()),
        Some(Ok(Err(code))) => Err(format!("{code:?}")),
        Some(Err(())) => Err("the response was already taken".to_string()),
        None => Err("the response never became ready".to_string()),
    }
}

fn result(status: Status, summary: String, data: String) -> ToolResult {
    ToolResult {
        status,
        summary: Some(summary),
        data: Some(data),
        data_path: None,
        truncated: false,
        metadata: Vec::new(),
    }
}

export!(Component);
