//! One plain (non-streaming) HTTP POST through `wasi:http/outgoing-handler`.
//!
//! [`post`] sends a request body (through the outgoing-body stream, at most
//! 4096 bytes per `blocking-write-and-flush`), waits for the response and
//! reads the whole body, up to a cap. This is a trimmed copy of
//! `driver-anthropic`'s `http` module without the incremental reads: an
//! older-style driver that waits for the complete answer.
//!
//! Every failure is a `String` naming what failed; a transport error carries
//! the `wasi:http` error code (`HttpRequestDenied` when the host policy
//! refused the request, `ConnectionRefused`, …).
//!
//! Deliberately not done: no redirects are followed, no retries, no timeouts
//! of its own (the host bounds every call).

use wasip2::http::outgoing_handler;
use wasip2::http::types::{ErrorCode, Fields, OutgoingBody, OutgoingRequest, Method, Scheme};
use wasip2::io::streams::StreamError;

/// The most bytes one `blocking-write-and-flush` call may carry.
const WRITE_CHUNK: usize = 4096;
/// How many bytes to ask for per body read.
const READ_CHUNK: u64 = 64 * 1024;

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Target {
    pub https: bool,
    pub authority: String,
    pub path: String,
}

/// `{endpoint}/v1/messages`, trailing slashes of the endpoint removed. The
/// endpoint may carry a path prefix, not a query.
pub fn messages_target(endpoint: &str) -> Result<Target, String> {
    let endpoint = endpoint.trim();
    let bad = |why: &str| Err(format!("MURMUR_INFERENCE_ENDPOINT `{endpoint}` {why}"));
    let lower = endpoint.to_ascii_lowercase();
    let (https, rest) = if lower.starts_with("https://") {
        (true, &endpoint[8..])
    } else if lower.starts_with("http://") {
        (false, &endpoint[7..])
    } else {
        return bad("must start with http:// or https://");
    };
    if rest.contains(['?', '#']) {
        return bad("must not carry a query or fragment");
    }
    let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    if authority.is_empty() {
        return bad("has no host");
    }
    let path = format!("{}/v1/messages", prefix.trim_end_matches('/'));
    Ok(Target { https, authority: authority.to_string(), path })
}

/// A complete response.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    /// More than the cap was sent; `body` holds the first `cap` bytes.
    pub cut: bool,
}

fn describe(code: &ErrorCode) -> String {
    format!("{code:?}")
}

fn stream_error(e: StreamError) -> String {
    match e {
        StreamError::Closed => "the connection closed".to_string(),
        StreamError::LastOperationFailed(e) => match wasip2::http::types::http_error_code(&e) {
            Some(code) => describe(&code),
            None => e.to_debug_string(),
        },
    }
}

/// POST `body` to `target` with `headers`; returns the whole response, its
/// body read up to `cap` bytes.
pub fn post(target: &Target, headers: &[(&str, &str)], body: &[u8], cap: usize) -> Result<Response, String> {
    let list: Vec<(String, Vec<u8>)> =
        headers.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect();
    let fields = Fields::from_list(&list).map_err(|e| format!("invalid request header: {e:?}"))?;
    let request = OutgoingRequest::new(fields);
    let scheme = if target.https { Scheme::Https } else { Scheme::Http };
    let accepted = request.set_method(&Method::Post).is_ok()
        && request.set_scheme(Some(&scheme)).is_ok()
        && request.set_authority(Some(&target.authority)).is_ok()
        && request.set_path_with_query(Some(&target.path)).is_ok();
    if !accepted {
        return Err(format!("the request line was refused (authority `{}`, path `{}`)", target.authority, target.path));
    }
    let outgoing = request.body().map_err(|()| "the request body was already taken".to_string())?;
    let future = outgoing_handler::handle(request, None).map_err(|code| format!("transport error: {}", describe(&code)))?;
    let written = write_all(&outgoing, body);
    let written = match written {
        Ok(()) => OutgoingBody::finish(outgoing, None).map_err(|code| describe(&code)),
        // Dropped without `finish`: the host sees a broken body, never a short one.
        Err(e) => {
            drop(outgoing);
            Err(e)
        }
    };
    let pollable = future.subscribe();
    pollable.block();
    drop(pollable);
    let response = match future.get() {
        Some(Ok(Ok(response))) => response,
        Some(Ok(Err(code))) => return Err(format!("transport error: {}", describe(&code))),
        Some(Err(())) => return Err("the response was already taken".into()),
        None => return Err(match written {
            Err(e) => format!("writing the request body failed: {e}"),
            Ok(()) => "the response never became ready".into(),
        }),
    };
    drop(future);
    let status = response.status();
    let incoming = response.consume().map_err(|()| "the response body was already taken".to_string())?;
    let stream = incoming.stream().map_err(|()| "the response body stream was already taken".to_string())?;
    let mut all = Vec::new();
    let mut cut = false;
    loop {
        match stream.blocking_read(READ_CHUNK) {
            Ok(bytes) => all.extend_from_slice(&bytes),
            Err(StreamError::Closed) => break,
            Err(e) => return Err(format!("reading the response body failed: {}", stream_error(e))),
        }
        if all.len() > cap {
            all.truncate(cap);
            cut = true;
            break;
        }
    }
    // Children before parents: the stream, then the body, then the response.
    drop(stream);
    drop(incoming);
    drop(response);
    Ok(Response { status, body: all, cut })
}

/// Write `body` through the outgoing stream, ≤ 4096 bytes per call.
fn write_all(outgoing: &OutgoingBody, body: &[u8]) -> Result<(), String> {
    let stream = outgoing.write().map_err(|()| "the request body stream was already taken".to_string())?;
    for chunk in body.chunks(WRITE_CHUNK) {
        stream.blocking_write_and_flush(chunk).map_err(stream_error)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets() {
        let t = messages_target("http://127.0.0.1:9/").unwrap();
        assert_eq!(t, Target { https: false, authority: "127.0.0.1:9".into(), path: "/v1/messages".into() });
        let t = messages_target("HTTPS://api.example.com/gw//").unwrap();
        assert_eq!(t, Target { https: true, authority: "api.example.com".into(), path: "/gw/v1/messages".into() });
        assert!(messages_target("ftp://x").is_err());
        assert!(messages_target("http:///x").is_err());
        assert!(messages_target("http://x/?a=1").is_err());
        assert!(messages_target("httpé").is_err());
    }
}
