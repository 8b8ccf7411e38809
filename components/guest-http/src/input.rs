//! Everything a driver checks before it sends anything: the neutral request
//! in `tool-input.data`, the driver's translation of it, and
//! `MURMUR_INFERENCE_ENDPOINT`.
//!
//! Guarantees: the checks run in this order and the first failure is the
//! message (a driver returns it as an `error` result, see [`crate::shape`]):
//! `no input: …` (absent or blank), `input is not valid JSON: …` (the same
//! documents refused, with the same serde_json message, whichever form the
//! input is read into), `invalid inference request: <the translation's
//! error>`, `MURMUR_INFERENCE_ENDPOINT is unusable: …` (unset or not UTF-8),
//! the endpoint's own refusal ([`crate::target`]).
//!
//! The input is read into a form the driver picks ([`Parse`]): the
//! borrowed [`neutral::Input`] for the streaming drivers, a
//! `serde_json::Value` for `driver-legacy`. The translation writes the
//! provider body itself, so nothing is serialised here (the old last check,
//! `cannot serialise the request`, could not fail and is gone).
//!
//! Deliberately not done: the translation itself (each driver's `request`
//! module), credentials (the host gateway adds them).

use serde_json::Value;

use crate::neutral;
use crate::target::{Target, endpoint_target};

/// A form `tool-input.data` can be read into.
pub trait Parse<'a>: Sized {
    /// Read the document; the error is serde_json's.
    fn parse(data: &'a str) -> Result<Self, serde_json::Error>;
}

impl<'a> Parse<'a> for Value {
    fn parse(data: &'a str) -> Result<Self, serde_json::Error> {
        serde_json::from_str(data)
    }
}

impl<'a> Parse<'a> for neutral::Input<'a> {
    fn parse(data: &'a str) -> Result<Self, serde_json::Error> {
        neutral::Input::parse(data)
    }
}

/// Read and translate the request and find the endpoint; returns where to
/// send what. `translate` returns the provider body; `path` is appended to
/// the endpoint ([`endpoint_target`]).
pub fn prepare<'a, I: Parse<'a>>(
    data: Option<&'a str>,
    translate: impl FnOnce(&I) -> Result<Vec<u8>, String>,
    path: &str,
) -> Result<(Target, Vec<u8>), String> {
    prepare_with(data, I::parse, translate, path)
}

/// [`prepare`], with the document read by `parse` (for a driver that passes a
/// [`neutral::Transcode`] to [`neutral::Input::parse_with`]).
pub fn prepare_with<'a, I>(
    data: Option<&'a str>,
    parse: impl FnOnce(&'a str) -> Result<I, serde_json::Error>,
    translate: impl FnOnce(&I) -> Result<Vec<u8>, String>,
    path: &str,
) -> Result<(Target, Vec<u8>), String> {
    let data = data
        .filter(|d| !d.trim().is_empty())
        .ok_or("no input: tool-input.data must hold the neutral inference request JSON")?;
    let req = parse(data).map_err(|e| format!("input is not valid JSON: {e}"))?;
    let body = translate(&req).map_err(|e| format!("invalid inference request: {e}"))?;
    let endpoint = std::env::var("MURMUR_INFERENCE_ENDPOINT")
        .map_err(|e| format!("MURMUR_INFERENCE_ENDPOINT is unusable: {e}"))?;
    let target = endpoint_target(&endpoint, path)?;
    Ok((target, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refuse(_: &neutral::Input) -> Result<Vec<u8>, String> {
        Err("`model` is missing".into())
    }

    fn refuse_value(_: &Value) -> Result<Vec<u8>, String> {
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

    #[test]
    fn both_forms_refuse_the_same_documents_with_the_same_message() {
        let path = "/v1/messages";
        for data in ["{", "[1,]", "{\"a\":\"\\ud800\"}", "{\"params\":{\"t\":1e400}}", "{} x", "{\"a\":1,}"] {
            let typed = prepare(Some(data), refuse, path).unwrap_err();
            let value = prepare(Some(data), refuse_value, path).unwrap_err();
            assert!(typed.starts_with("input is not valid JSON: "), "{data}: {typed}");
            assert_eq!(typed, value, "{data}");
        }
    }
}
