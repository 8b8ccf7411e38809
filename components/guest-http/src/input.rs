//! Everything a driver checks before it sends anything: the neutral request
//! in `tool-input.data`, the driver's translation of it, and
//! `MURMUR_INFERENCE_ENDPOINT`.
//!
//! Guarantees: the checks run in this order and the first failure is the
//! message (a driver returns it as an `error` result, see [`crate::shape`]):
//! `no input: …` (absent or blank), `input is not valid JSON: …`,
//! `invalid inference request: <the translation's error>`,
//! `MURMUR_INFERENCE_ENDPOINT is unusable: …` (unset or not UTF-8), the
//! endpoint's own refusal ([`crate::target`]), `cannot serialise the
//! request: …`.
//!
//! Deliberately not done: the translation itself (each driver's `request`
//! module), credentials (the host gateway adds them).

use serde_json::Value;

use crate::target::{Target, endpoint_target};

/// Parse and translate the request and find the endpoint; returns where to
/// send what. `path` is appended to the endpoint ([`endpoint_target`]).
pub fn prepare(
    data: Option<&str>,
    translate: impl FnOnce(&Value) -> Result<Value, String>,
    path: &str,
) -> Result<(Target, Vec<u8>), String> {
    let data = data
        .filter(|d| !d.trim().is_empty())
        .ok_or("no input: tool-input.data must hold the neutral inference request JSON")?;
    let req: Value = serde_json::from_str(data).map_err(|e| format!("input is not valid JSON: {e}"))?;
    let body = translate(&req).map_err(|e| format!("invalid inference request: {e}"))?;
    let endpoint = std::env::var("MURMUR_INFERENCE_ENDPOINT")
        .map_err(|e| format!("MURMUR_INFERENCE_ENDPOINT is unusable: {e}"))?;
    let target = endpoint_target(&endpoint, path)?;
    let body = serde_json::to_vec(&body).map_err(|e| format!("cannot serialise the request: {e}"))?;
    Ok((target, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuse(_: &Value) -> Result<Value, String> {
        Err("`model` is missing".into())
    }

    #[test]
    fn input_errors_come_before_the_endpoint() {
        let path = "/v1/messages";
        assert_eq!(
            prepare(None, refuse, path).unwrap_err(),
            "no input: tool-input.data must hold the neutral inference request JSON"
        );
        assert!(prepare(Some(" \n"), refuse, path).unwrap_err().starts_with("no input"));
        assert!(prepare(Some("{"), refuse, path).unwrap_err().starts_with("input is not valid JSON: "));
        assert_eq!(prepare(Some("{}"), refuse, path).unwrap_err(), "invalid inference request: `model` is missing");
    }
}
