//! Raw turns: a recorded provider response replayed byte for byte.
//!
//! The bodies are read once, when the stub starts ([`load_bodies`]), so a missing file is a start
//! error naming the turn and the file rather than a surprising answer in the middle of a test.
//! [`answer`] sends the scripted status and content type and the body as it is: whole, with a
//! `content-length`, or cut every `chunk_bytes` bytes and streamed one frame per piece (through
//! the same body stream as rendered answers, so each piece really leaves as its own frame).
//!
//! Guarantees: the bytes on the wire are exactly the file's (or the string's) bytes, in order;
//! pieces are cut on byte counts alone, even inside a multi-byte UTF-8 character. Deliberately
//! not here: any reading of the body (it may be invalid SSE, invalid JSON or not UTF-8 at all).

use std::sync::Arc;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;

use crate::body::event_body;
use crate::record::Entry;
use crate::server::Shared;
use crate::{RawResponse, Script, StubError};

/// The body of every raw turn, by turn index (`None` for rendered turns).
pub(crate) fn load_bodies(script: &Script) -> Result<Vec<Option<Bytes>>, StubError> {
    script
        .turns
        .iter()
        .enumerate()
        .map(|(turn, spec)| spec.raw.as_ref().map(|raw| body(turn, raw)).transpose())
        .collect()
}

/// One raw turn's bytes: the string, or the file's content.
fn body(turn: usize, raw: &RawResponse) -> Result<Bytes, StubError> {
    match (&raw.body, &raw.body_file) {
        (Some(text), _) => Ok(Bytes::from(text.clone())),
        (None, Some(path)) => std::fs::read(path).map(Bytes::from).map_err(|source| StubError::ReadRawBody {
            turn,
            path: path.clone(),
            source,
        }),
        // `Script::validate` refuses a raw turn without a body source before the stub starts.
        (None, None) => Ok(Bytes::new()),
    }
}

/// Cuts `body` every `size` bytes (the last piece may be shorter). An empty body has no pieces.
pub(crate) fn frames(body: &Bytes, size: usize) -> Vec<Bytes> {
    let size = size.max(1);
    (0..body.len()).step_by(size).map(|start| body.slice(start..(start + size).min(body.len()))).collect()
}

/// The answer for a raw turn whose bytes are `body`.
pub(crate) fn answer(shared: &Arc<Shared>, entry: Entry, raw: &RawResponse, body: Bytes) -> Response {
    let mut response = match raw.chunk_bytes {
        Some(size) => Response::new(event_body(Arc::clone(shared), entry, frames(&body, size), false, None)),
        None => {
            shared.recorder.finish(entry);
            Response::new(Body::from(body))
        }
    };
    *response.status_mut() = StatusCode::from_u16(raw.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    // Both were checked by `Script::validate` when the stub started.
    if let Ok(value) = HeaderValue::from_str(&raw.content_type) {
        response.headers_mut().insert(header::CONTENT_TYPE, value);
    }
    response
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_cut_on_byte_counts_even_inside_a_character() {
        let body = Bytes::from("aé日b");
        let pieces = frames(&body, 2);
        assert_eq!(pieces, [&b"a\xc3"[..], b"\xa9\xe6", b"\x97\xa5", b"b"].map(Bytes::from_static));
        assert!(frames(&Bytes::new(), 3).is_empty());
        assert_eq!(frames(&Bytes::from("abc"), 10), [Bytes::from("abc")]);
    }
}
