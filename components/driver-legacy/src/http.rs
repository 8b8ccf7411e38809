//! One plain (non-streaming) HTTP POST: `guest-http`'s [`post`] through
//! `wasi:http/outgoing-handler`, then the whole response body read at once,
//! up to a cap. An older-style driver that waits for the complete answer.
//!
//! Guarantees: the same request as `guest-http` sends (body written ≤ 4096
//! bytes per `blocking-write-and-flush`, every header as given, including
//! this fixture's own auth headers); the body is read in pieces of at most
//! 64 KiB; every failure is a `String` naming what failed, a transport error
//! carries the `wasi:http` error code (`HttpRequestDenied` when the host
//! policy refused the request, `ConnectionRefused`, …). The response's
//! resources are released before [`post`] returns.
//!
//! Deliberately not done: no incremental reads, no redirects, no retries, no
//! timeouts of its own (the host bounds every call).

pub use guest_http::target::Target;

/// How many bytes to ask for per body read.
const READ_CHUNK: u64 = 64 * 1024;

/// A complete response.
pub struct Response {
    pub status: u16,
    pub body: Vec<u8>,
    /// More than the cap was sent; `body` holds the first `cap` bytes.
    pub cut: bool,
}

/// POST `body` to `target` with `headers`; returns the whole response, its
/// body read up to `cap` bytes.
pub fn post(target: &Target, headers: &[(&str, &str)], body: &[u8], cap: usize) -> Result<Response, String> {
    let mut response = guest_http::http::post(target, headers, body)?;
    response.body.set_read_chunk(READ_CHUNK);
    let (body, cut) = response.body.read_to_end(cap)?;
    Ok(Response { status: response.status, body, cut })
}
