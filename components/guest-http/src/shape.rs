//! The three result shapes every driver returns (components/README.md,
//! "Shapes"), without the `wit` types: each driver maps a [`Shaped`] onto its
//! own generated `tool-result` in one place.
//!
//! - [`outcome`]: the call was made. No error → `passed` with the neutral
//!   response as `data`; an error → `failed`, `summary` = the message, `data`
//!   = the response (which already says `stop_reason: "error"`).
//! - [`input_error`]: nothing was sent (bad input or environment) →
//!   `error`, `summary` = the message, `data` = [`error_response`].
//!
//! Guarantees: `data` is always the compact JSON text of a neutral response.
//!
//! Deliberately not done: building the neutral response of a call (that is
//! each driver's assembler), metadata, `data-path`, truncation.

use serde_json::{Value, json};

/// Which of the three result statuses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Passed,
    Failed,
    Error,
}

/// A result before it becomes the driver's own `tool-result`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shaped {
    pub status: Verdict,
    pub summary: Option<String>,
    pub data: String,
}

/// The result of a call that was made: `response` is the neutral response,
/// `error` why the call failed, if it did.
pub fn outcome(response: &Value, error: Option<String>) -> Shaped {
    let data = compact(response);
    match error {
        None => Shaped { status: Verdict::Passed, summary: None, data },
        Some(message) => Shaped { status: Verdict::Failed, summary: Some(message), data },
    }
}

/// The input or environment is unusable: nothing was sent.
pub fn input_error(message: String) -> Shaped {
    let data = compact(&error_response(&message));
    Shaped { status: Verdict::Error, summary: Some(message), data }
}

/// `value`'s compact JSON text, written straight into a string: the same text as `to_string`
/// (its `Display`), which goes through the formatter a piece at a time and cost a call about
/// 20,000 guest instructions more.
fn compact(value: &Value) -> String {
    // A `Value` always serializes (its keys are strings); the empty text is never reached.
    serde_json::to_string(value).unwrap_or_default()
}

/// The neutral response of a call that produced nothing:
/// `{"stop_reason": "error", "content": [], "error": message}`.
pub fn error_response(message: &str) -> Value {
    json!({"stop_reason": "error", "content": [], "error": message})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_three_shapes() {
        let ok = json!({"stop_reason": "end_turn", "content": []});
        assert_eq!(
            outcome(&ok, None),
            Shaped {
                status: Verdict::Passed,
                summary: None,
                data: r#"{"content":[],"stop_reason":"end_turn"}"#.into()
            }
        );
        let failed = outcome(&error_response("HTTP 500: x"), Some("HTTP 500: x".into()));
        assert_eq!(failed.status, Verdict::Failed);
        assert_eq!(failed.summary.as_deref(), Some("HTTP 500: x"));
        assert_eq!(failed.data, r#"{"content":[],"error":"HTTP 500: x","stop_reason":"error"}"#);
        let e = input_error("no input".into());
        assert_eq!(e.status, Verdict::Error);
        assert_eq!(e.summary.as_deref(), Some("no input"));
        assert_eq!(e.data, r#"{"content":[],"error":"no input","stop_reason":"error"}"#);
    }
}
