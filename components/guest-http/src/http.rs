//! One HTTP POST through `wasi:http/outgoing-handler` (the `wasip2` crate).
//!
//! [`post`] sends a request body (with its `content-length`, written through
//! the outgoing-body stream in as few writes as the host's budget allows) and
//! waits for the response head; [`Body::read`] then hands the
//! response body over piece by piece as it arrives, so the caller can parse
//! while the provider is still sending, and [`Body::read_to_end`] reads what
//! is left up to a cap, for callers that want the whole answer.
//!
//! Guarantees: every failure is a `String` naming what failed; a transport
//! error carries the `wasi:http` error code (for example `HttpRequestDenied`
//! when the host policy refused the request, `ConnectionRefused`). A request
//! body that could not be written whole is never finished, so the host sees
//! a broken body, not a short one. Resources are dropped children first.
//!
//! Deliberately not done: no redirects are followed, no retries, no timeouts
//! of its own (the host bounds every call), no headers of its own (the
//! caller passes every header; the streaming drivers send no auth header,
//! the host gateway adds the credential).

use wasip2::http::outgoing_handler;
use wasip2::http::types::{
    ErrorCode, Fields, IncomingBody, IncomingResponse, Method, OutgoingBody, OutgoingRequest, Scheme,
};
use wasip2::io::streams::{InputStream, StreamError};

use crate::target::Target;

/// How many bytes to ask for per body read, unless [`Body::set_read_chunk`]
/// says otherwise.
const READ_CHUNK: u64 = 16 * 1024;

/// A response whose head has arrived; the body is read on demand.
pub struct Response {
    pub status: u16,
    /// The `content-type` header, lower-cased; empty when absent.
    pub content_type: String,
    pub body: Body,
}

/// The response body stream. Field order matters: Rust drops fields in
/// declaration order, and the host wants a child resource (the stream)
/// dropped before its parent (the body, then the response).
pub struct Body {
    stream: InputStream,
    _body: IncomingBody,
    _response: IncomingResponse,
    /// The most bytes one read asks for.
    chunk: u64,
}

impl Body {
    /// Ask for at most `bytes` per read from now on (the default is 16 KiB).
    /// Changes how the body is fetched, never what is read.
    pub fn set_read_chunk(&mut self, bytes: u64) {
        self.chunk = bytes;
    }

    /// The next piece of the body, `None` at its end.
    pub fn read(&mut self) -> Result<Option<Vec<u8>>, String> {
        match self.stream.blocking_read(self.chunk) {
            Ok(bytes) => Ok(Some(bytes)),
            Err(StreamError::Closed) => Ok(None),
            Err(StreamError::LastOperationFailed(e)) => {
                let why = match wasip2::http::types::http_error_code(&e) {
                    Some(code) => describe(&code),
                    None => e.to_debug_string(),
                };
                Err(format!("reading the response body failed: {why}"))
            }
        }
    }

    /// Read the rest of the body, at most `cap` bytes; the flag says whether
    /// more was left unread.
    pub fn read_to_end(&mut self, cap: usize) -> Result<(Vec<u8>, bool), String> {
        let mut all = Vec::new();
        while let Some(bytes) = self.read()? {
            all.extend_from_slice(&bytes);
            if all.len() > cap {
                all.truncate(cap);
                return Ok((all, true));
            }
        }
        Ok((all, false))
    }
}

/// A `wasi:http` error code as text.
pub fn describe(code: &ErrorCode) -> String {
    format!("{code:?}")
}

/// POST `body` to `target` with `headers`; returns once the response head is in.
pub fn post(target: &Target, headers: &[(&str, &str)], body: &[u8]) -> Result<Response, String> {
    let mut list: Vec<(String, Vec<u8>)> =
        headers.iter().map(|(k, v)| (k.to_string(), v.as_bytes().to_vec())).collect();
    // The length is known: the body goes out as one sized message, not in chunked framing.
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-length")) {
        list.push(("content-length".to_string(), body.len().to_string().into_bytes()));
    }
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
    // Hand the request over first, then stream the body: the host may only
    // start draining the body once it owns the request.
    let future =
        outgoing_handler::handle(request, None).map_err(|code| format!("transport error: {}", describe(&code)))?;
    let written = write_all(&outgoing, body);
    let written = match written {
        // `finish` tells the host the body is complete.
        Ok(()) => OutgoingBody::finish(outgoing, None).map_err(|code| describe(&code)),
        // Dropping without `finish` marks the body as broken, so a partial
        // body is never passed off as a whole one.
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
        None => {
            return Err(match written {
                Err(e) => format!("writing the request body failed: {e}"),
                Ok(()) => "the response never became ready".into(),
            });
        }
    };
    drop(future);
    let status = response.status();
    let head = response.headers();
    let content_type = head
        .get("content-type")
        .first()
        .map(|v| String::from_utf8_lossy(v).trim().to_ascii_lowercase())
        .unwrap_or_default();
    drop(head);
    let incoming = response.consume().map_err(|()| "the response body was already taken".to_string())?;
    let stream = incoming.stream().map_err(|()| "the response body stream was already taken".to_string())?;
    Ok(Response {
        status,
        content_type,
        body: Body { stream, _body: incoming, _response: response, chunk: READ_CHUNK },
    })
}

/// Write `body` through the outgoing stream: as much per `write` as the host permits (its
/// `check-write` budget, usually the whole body), waiting only when it permits nothing, then
/// one flush. One piece per host round trip would cost a round trip per 4 KiB.
fn write_all(outgoing: &OutgoingBody, body: &[u8]) -> Result<(), String> {
    let stream = outgoing.write().map_err(|()| "the request body stream was already taken".to_string())?;
    let words = |e: StreamError| match e {
        StreamError::Closed => "the connection closed".to_string(),
        StreamError::LastOperationFailed(e) => match wasip2::http::types::http_error_code(&e) {
            Some(code) => describe(&code),
            None => e.to_debug_string(),
        },
    };
    let mut rest = body;
    while !rest.is_empty() {
        let permitted = stream.check_write().map_err(words)?;
        if permitted == 0 {
            stream.subscribe().block();
            continue;
        }
        let n = rest.len().min(usize::try_from(permitted).unwrap_or(usize::MAX));
        stream.write(&rest[..n]).map_err(words)?;
        rest = &rest[n..];
    }
    stream.blocking_flush().map_err(words)
}
