//! Test support for the drivers (feature `testing`, on only in their tests): the shared neutral
//! requests of `testdata/neutral_requests.jsonl` and the differential checks of a driver's
//! translation against a reference one (the old `Value`-based translation each driver keeps in
//! its tests).
//!
//! Guarantees: each check panics naming the request that differs, and fails when it compared
//! fewer requests than it should (so an emptied data file cannot make it pass).
//!
//! Deliberately not done: any provider rule; `normalize` is where a driver says which
//! differences do not matter to its provider.

use serde_json::{Value, json};

use crate::neutral::Input;

const REQUESTS: &str = include_str!("../testdata/neutral_requests.jsonl");

/// A translation of a request given as text: its body parsed back, or its error.
pub type Translation<'a> = &'a dyn Fn(&str) -> Result<Value, String>;

/// The shared requests (blank lines and `//` comments left out).
pub fn requests() -> impl Iterator<Item = &'static str> {
    REQUESTS.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with("//"))
}

/// `translate` applied to `data` read as an [`Input`], its body parsed back.
pub fn parsed(data: &str, translate: fn(&Input) -> Result<Vec<u8>, String>) -> Result<Value, String> {
    let input = Input::parse(data).map_err(|e| format!("not JSON: {e}"))?;
    let body = translate(&input)?;
    Ok(serde_json::from_slice(&body)
        .unwrap_or_else(|e| panic!("body is not JSON ({e}): {}", String::from_utf8_lossy(&body))))
}

/// Every shared request the reference translates gives the same body (after `normalize`).
pub fn bodies_match(
    new: Translation,
    reference: Translation,
    normalize: fn(Result<Value, String>) -> Result<Value, String>,
) {
    let mut compared = 0;
    for data in requests() {
        if let Ok(expected) = reference(data) {
            assert_eq!(normalize(new(data)), normalize(Ok(expected)), "{data}");
            compared += 1;
        }
    }
    assert!(compared >= 25, "only {compared} requests compared");
}

/// Every shared request the reference refuses is refused with the same message.
pub fn errors_match(new: Translation, reference: Translation) {
    let mut compared = 0;
    for data in requests() {
        if let Err(expected) = reference(data) {
            assert_eq!(new(data), Err(expected), "{data}");
            compared += 1;
        }
    }
    assert!(compared >= 60, "only {compared} requests compared");
}

/// 300 requests made of the shared requests' messages, tools and params in pseudo-random order
/// and number (written by serde_json, as the runtime writes them): the same answer from both.
pub fn shuffled_match(new: Translation, reference: Translation) {
    let (mut messages, mut tools, mut params) = (Vec::new(), Vec::new(), vec![Value::Null]);
    for data in requests() {
        let Ok(Value::Object(req)) = serde_json::from_str::<Value>(data) else { continue };
        if reference(data).is_err() {
            continue;
        }
        messages.extend(req.get("messages").and_then(Value::as_array).into_iter().flatten().cloned());
        tools.extend(req.get("tools").and_then(Value::as_array).into_iter().flatten().cloned());
        params.extend(req.get("params").cloned());
    }
    assert!(!messages.is_empty() && !tools.is_empty(), "the shared requests hold messages and tools");
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = |n: usize| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        (seed % n as u64) as usize
    };
    for _ in 0..300 {
        let msgs: Vec<Value> = (0..next(12)).map(|_| messages[next(messages.len())].clone()).collect();
        let tls: Vec<Value> = (0..next(4)).map(|_| tools[next(tools.len())].clone()).collect();
        let system = ["", "s"][next(2)];
        let req = json!({"model": "m", "max_tokens": 5, "system": system, "messages": msgs,
                         "tools": tls, "params": params[next(params.len())]});
        let data = req.to_string();
        assert_eq!(new(&data), reference(&data), "{data}");
    }
}
