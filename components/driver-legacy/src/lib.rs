//! `driver-legacy`: a TEST FIXTURE imitating the inference drivers built
//! before host gateways existed.
//!
//! It exists to prove that the host's gateway handles artifacts built
//! elsewhere, the old way: it imports only `murmur:text/chunks` (no
//! tool-call events), reads its key from `MURMUR_INFERENCE_API_KEY` itself
//! (the literal `legacy-placeholder` when that is unset, empty or not
//! UTF-8; under a gateway the host never passes the key, so this is what it
//! normally sends) and sets BOTH `x-api-key: <key>` and
//! `authorization: Bearer <key>` on the request, which the gateway must
//! strip and replace with the real credential.
//!
//! One `run` call is one NON-streaming Anthropic Messages call: the neutral
//! request in `tool-input.data` is translated ([`request`]), POSTed with
//! `stream: false` and `anthropic-version: 2023-06-01` to
//! `{MURMUR_INFERENCE_ENDPOINT}/v1/messages` ([`http`]), the whole JSON
//! answer is read ([`response`]), `emit-chunk` is called once with the
//! full text (not at all when there is none), and the neutral response is
//! returned with the same shapes as the other drivers: `passed` + response;
//! `failed` + `summary` = message + `data` with `stop_reason: "error"`,
//! `error` and the content found; `error` when nothing was sent.
//!
//! Deliberately not done: streaming, images, thinking, continuation,
//! retries. Not a driver to use for real work. Nothing here panics.

mod http;
mod request;
mod response;

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/legacy-driver@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};
use guest_http::shape::{self, Shaped, Verdict};
use murmur::text::chunks;
use serde_json::Value;

/// An error body longer than this is cut in the error message.
const ERROR_BODY_CAP: usize = 16 * 1024;
/// A response body larger than this is refused.
const BODY_CAP: usize = 64 * 1024 * 1024;
/// The key sent when the environment holds none.
const PLACEHOLDER_KEY: &str = "legacy-placeholder";

struct Component;

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        let (target, body) = match prepare(input.data.as_deref()) {
            Ok(prepared) => prepared,
            Err(message) => return result(shape::input_error(message)),
        };
        let key = api_key(std::env::var("MURMUR_INFERENCE_API_KEY").ok());
        let bearer = format!("Bearer {key}");
        let headers = [
            ("content-type", "application/json"),
            ("accept", "application/json"),
            ("anthropic-version", "2023-06-01"),
            ("x-api-key", key.as_str()),
            ("authorization", bearer.as_str()),
        ];
        let parsed = match http::post(&target, &headers, &body, BODY_CAP) {
            Ok(answer) => answer_to_response(answer),
            Err(message) => failure(message),
        };
        if !parsed.text.is_empty() {
            chunks::emit_chunk(&parsed.text);
        }
        result(shape::outcome(&parsed.response, parsed.error))
    }
}

export!(Component);

/// The key to send: the environment's, else the placeholder.
fn api_key(from_env: Option<String>) -> String {
    from_env.filter(|k| !k.is_empty()).unwrap_or_else(|| PLACEHOLDER_KEY.to_string())
}

/// Everything that can go wrong before a request is sent. This fixture
/// still reads the request into a `Value` and builds its body as one.
fn prepare(data: Option<&str>) -> Result<(http::Target, Vec<u8>), String> {
    let translate = |req: &Value| request::translate(req).map(|body| body.to_string().into_bytes());
    guest_http::input::prepare(data, translate, "/v1/messages")
}

/// A complete HTTP answer → the parsed neutral response.
fn answer_to_response(answer: http::Response) -> response::Parsed {
    if !(200..300).contains(&answer.status) {
        let mut text = String::from_utf8_lossy(&answer.body).into_owned();
        if answer.cut || text.len() > ERROR_BODY_CAP {
            let mut end = ERROR_BODY_CAP.min(text.len());
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
            text.push_str("… (cut)");
        }
        return failure(format!("HTTP {}: {}", answer.status, text));
    }
    if answer.cut {
        return failure(format!("the response body is larger than {BODY_CAP} bytes"));
    }
    let Ok(text) = String::from_utf8(answer.body) else {
        return failure("the response body is not valid UTF-8".into());
    };
    match serde_json::from_str::<Value>(&text) {
        Ok(body) => response::parse(&body),
        Err(e) => failure(format!("the response body is not valid JSON: {e}")),
    }
}

/// The call failed before any content arrived.
fn failure(message: String) -> response::Parsed {
    let response = shape::error_response(&message);
    response::Parsed { response, text: String::new(), error: Some(message) }
}

fn result(shaped: Shaped) -> ToolResult {
    let status = match shaped.status {
        Verdict::Passed => Status::Passed,
        Verdict::Failed => Status::Failed,
        Verdict::Error => Status::Error,
    };
    ToolResult {
        status,
        summary: shaped.summary,
        data: Some(shaped.data),
        data_path: None,
        truncated: false,
        metadata: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn answer(status: u16, body: &[u8]) -> response::Parsed {
        answer_to_response(http::Response { status, body: body.to_vec(), cut: false })
    }

    #[test]
    fn the_key_falls_back_to_the_placeholder() {
        assert_eq!(api_key(None), "legacy-placeholder");
        assert_eq!(api_key(Some(String::new())), "legacy-placeholder");
        assert_eq!(api_key(Some("sk-1".into())), "sk-1");
    }

    #[test]
    fn answers() {
        let p = answer(200, br#"{"content":[{"type":"text","text":"hi"}],"stop_reason":"end_turn","usage":{"input_tokens":1,"output_tokens":2}}"#);
        assert_eq!(p.error, None);
        assert_eq!(p.text, "hi");
        assert_eq!(
            p.response,
            json!({"stop_reason": "end_turn", "content": [{"type": "text", "text": "hi"}],
                                      "usage": {"input_tokens": 1, "output_tokens": 2}})
        );
        let p = answer(401, br#"{"type":"error"}"#);
        assert_eq!(p.error.as_deref(), Some(r#"HTTP 401: {"type":"error"}"#));
        assert_eq!(
            p.response,
            json!({"stop_reason": "error", "content": [], "error": r#"HTTP 401: {"type":"error"}"#})
        );
        assert_eq!(answer(200, b"\xff").error.as_deref(), Some("the response body is not valid UTF-8"));
        assert!(answer(200, b"nope").error.unwrap().starts_with("the response body is not valid JSON"));
        let long = "é".repeat(ERROR_BODY_CAP);
        let e = answer(500, long.as_bytes()).error.unwrap();
        assert!(e.ends_with("… (cut)") && e.len() < ERROR_BODY_CAP + 40, "{}", e.len());
    }

    #[test]
    fn input_errors() {
        assert!(prepare(None).unwrap_err().starts_with("no input"));
        assert!(prepare(Some("[")).unwrap_err().starts_with("input is not valid JSON"));
        assert!(prepare(Some("{}")).unwrap_err().starts_with("invalid inference request: `model`"));
    }
}
