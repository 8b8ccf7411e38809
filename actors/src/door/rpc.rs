//! JSON-RPC 2.0 envelopes and errors.

use serde::Deserialize;
use serde_json::{Value, json};

/// Standard codes.
pub mod code {
    /// The body is not JSON.
    pub const PARSE_ERROR: i64 = -32700;
    /// The JSON is not a JSON-RPC request.
    pub const INVALID_REQUEST: i64 = -32600;
    /// No such method.
    pub const METHOD_NOT_FOUND: i64 = -32601;
    /// Wrong params.
    pub const INVALID_PARAMS: i64 = -32602;
    /// The runtime could not serve it.
    pub const INTERNAL: i64 = -32603;
    /// The task id is unknown.
    pub const TASK_NOT_FOUND: i64 = -32001;
    /// The task has ended and cannot be canceled (A2A `TaskNotCancelableError`).
    pub const TASK_NOT_CANCELABLE: i64 = -32002;
    /// Push notifications are not offered (A2A `PushNotificationNotSupportedError`).
    pub const PUSH_NOT_SUPPORTED: i64 = -32003;
    /// The operation is not supported in this case (A2A `UnsupportedOperationError`).
    pub const UNSUPPORTED_OPERATION: i64 = -32004;
    /// No part of the message is of a type the agent takes (A2A `ContentTypeNotSupportedError`).
    pub const CONTENT_TYPE_NOT_SUPPORTED: i64 = -32005;
    /// There is no extended agent card (A2A `ExtendedAgentCardNotConfiguredError`).
    pub const EXTENDED_CARD_NOT_CONFIGURED: i64 = -32007;
    /// No door token, or not this session's (answered with HTTP 401; outside the codes A2A
    /// names for its own errors).
    pub const UNAUTHORIZED: i64 = -32010;
}

/// Read a JSON-RPC 2.0 request from a POST's headers and body, or the error answer (HTTP
/// status and envelope) for what is wrong with it: the content type, an empty body, a body
/// that is not JSON, or JSON that is not a request.
pub fn envelope(headers: &axum::http::HeaderMap, body: &[u8]) -> Result<Request, (axum::http::StatusCode, Value)> {
    use axum::http::StatusCode;
    let null = Value::Null;
    let ct = headers.get(axum::http::header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    if !ct.to_ascii_lowercase().starts_with("application/json") {
        let msg = if ct.is_empty() {
            "the request has no content type; send JSON-RPC 2.0 with `Content-Type: application/json`".to_string()
        } else {
            format!("content type `{ct}` is not application/json; send JSON-RPC 2.0 as JSON")
        };
        return Err((StatusCode::UNSUPPORTED_MEDIA_TYPE, err(&null, code::INVALID_REQUEST, msg)));
    }
    if body.is_empty() {
        return Err((
            StatusCode::BAD_REQUEST,
            err(&null, code::PARSE_ERROR, "the body is empty; send a JSON-RPC 2.0 request object"),
        ));
    }
    let v: Value = serde_json::from_slice(body)
        .map_err(|e| (StatusCode::BAD_REQUEST, err(&null, code::PARSE_ERROR, format!("the body is not JSON: {e}"))))?;
    let id = v.get("id").cloned().unwrap_or(Value::Null);
    let mut req: Request = serde_json::from_value(v).map_err(|e| {
        (StatusCode::BAD_REQUEST, err(&id, code::INVALID_REQUEST, format!("not a JSON-RPC 2.0 request: {e}")))
    })?;
    if req.jsonrpc != "2.0" {
        return Err((
            StatusCode::BAD_REQUEST,
            err(&id, code::INVALID_REQUEST, format!("jsonrpc is `{}`; it must be \"2.0\"", req.jsonrpc)),
        ));
    }
    req.traceparent = headers.get("traceparent").and_then(|v| v.to_str().ok()).map(str::to_string);
    Ok(req)
}

/// A request.
#[derive(Debug, Deserialize)]
pub struct Request {
    /// Must be "2.0".
    pub jsonrpc: String,
    /// Method name.
    pub method: String,
    /// Params.
    #[serde(default)]
    pub params: Value,
    /// Id (absent for a notification; we answer anyway with null).
    #[serde(default)]
    pub id: Value,
    /// The W3C `traceparent` header, when the client sent one (checked when used).
    #[serde(skip)]
    pub traceparent: Option<String>,
}

/// A message part.
#[derive(Debug, Deserialize)]
pub struct Part {
    /// Text.
    pub text: Option<String>,
}

/// `params.message`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MessageParam {
    /// Client's id for the message (accepted for A2A compatibility; not used).
    #[allow(dead_code, reason = "part of the message shape clients send; nothing needs it yet")]
    pub message_id: Option<String>,
    /// Must be `user`.
    pub role: Option<String>,
    /// Parts; text parts are joined.
    pub parts: Vec<Part>,
    /// Context to continue.
    pub context_id: Option<String>,
}

/// `message/send` and `message/stream` params.
#[derive(Debug, Deserialize)]
pub struct SendParams {
    /// The message.
    pub message: MessageParam,
}

/// `tasks/get` and `tasks/cancel` params.
#[derive(Debug, Deserialize)]
pub struct TaskIdParams {
    /// Task id.
    pub id: String,
}

/// A success envelope.
pub fn ok(id: &Value, result: Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// An error envelope.
pub fn err(id: &Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

impl SendParams {
    /// The joined text, or why the message cannot become a task.
    pub fn text(&self) -> Result<String, String> {
        if let Some(role) = &self.message.role
            && role != "user"
        {
            return Err(format!("message.role is `{role}`; only `user` messages become tasks"));
        }
        let text: Vec<&str> = self.message.parts.iter().filter_map(|p| p.text.as_deref()).collect();
        if text.is_empty() {
            return Err("message.parts has no text part; send parts: [{\"text\": \"…\"}]".into());
        }
        Ok(text.join("\n"))
    }
}
