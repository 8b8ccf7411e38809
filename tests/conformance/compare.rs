//! Comparing what a driver did with what its fixture expects, reporting the first difference in
//! each part (tool status, response, events, requests) in one line a person can act on.

use serde_json::Value;

use crate::fixture::Fixture;
use crate::replay::Observed;

/// Longest rendering of one value in a message; longer ones are cut.
const SHOWN_CHARS: usize = 160;

/// `None` when `observed` is what `fixture` expects, else the differences.
pub fn differences(fixture: &Fixture, observed: &Observed) -> Option<String> {
    let mut found = Vec::new();
    if observed.tool_status != fixture.tool_status {
        found.push(format!(
            "tool status: expected {}, got {} (summary: {})",
            fixture.tool_status,
            observed.tool_status,
            shown_opt(observed.summary.as_deref())
        ));
    }
    match &observed.response {
        Err(why) => found.push(format!("response: {why}")),
        Ok(response) => found.extend(response_difference(fixture, response, observed.summary.as_deref())),
    }
    found.extend(events_difference(&fixture.events, &observed.events));
    let model_requests = observed.requests.iter().filter(|r| r.provider.is_some()).count();
    if model_requests != 1 || observed.requests.len() != 1 {
        let paths: Vec<String> = observed.requests.iter().map(|r| format!("{} {}", r.method, r.path)).collect();
        found.push(format!("requests: expected one model request, the stub saw {paths:?}"));
    }
    (!found.is_empty()).then(|| found.join("; "))
}

/// The response must equal the expected one, except that `error` is checked by substrings when
/// the fixture gives `error_contains` (the summary must contain them too).
fn response_difference(fixture: &Fixture, response: &Value, summary: Option<&str>) -> Option<String> {
    let mut got = response.clone();
    if !fixture.error_contains.is_empty() {
        let error = got.as_object_mut().and_then(|o| o.remove("error"));
        let Some(Value::String(error)) = error else {
            return Some(format!(
                "response.error: expected a message containing {:?}, got {}",
                fixture.error_contains,
                shown_opt(error.as_ref().map(Value::to_string).as_deref())
            ));
        };
        if let Some(missing) = fixture.error_contains.iter().find(|s| !error.contains(s.as_str())) {
            return Some(format!("response.error: expected it to contain {missing:?}, got {}", shown(&error)));
        }
        let summary = summary.unwrap_or_default();
        if let Some(missing) = fixture.error_contains.iter().find(|s| !summary.contains(s.as_str())) {
            return Some(format!("summary: expected it to contain {missing:?}, got {}", shown(summary)));
        }
    }
    first_difference("response", &fixture.response, &got)
}

/// The first place two JSON values differ, as `path: expected X, got Y`.
fn first_difference(path: &str, expected: &Value, got: &Value) -> Option<String> {
    match (expected, got) {
        (Value::Object(e), Value::Object(g)) => {
            for (key, e_value) in e {
                let at = format!("{path}.{key}");
                match g.get(key) {
                    None => return Some(format!("{at}: expected {}, but it is absent", shown(&e_value.to_string()))),
                    Some(g_value) => {
                        if let Some(d) = first_difference(&at, e_value, g_value) {
                            return Some(d);
                        }
                    }
                }
            }
            let extra = g.iter().find(|(key, _)| !e.contains_key(*key))?;
            Some(format!("{path}.{}: not expected, got {}", extra.0, shown(&extra.1.to_string())))
        }
        (Value::Array(e), Value::Array(g)) => {
            for (index, (e_item, g_item)) in e.iter().zip(g).enumerate() {
                if let Some(d) = first_difference(&format!("{path}[{index}]"), e_item, g_item) {
                    return Some(d);
                }
            }
            if e.len() == g.len() {
                return None;
            }
            let (shorter, what, item) =
                if e.len() > g.len() { (g.len(), "missing", &e[g.len()]) } else { (e.len(), "extra", &g[e.len()]) };
            Some(format!(
                "{path}: expected {} items, got {}; first {what}: {path}[{shorter}] = {}",
                e.len(),
                g.len(),
                shown(&item.to_string())
            ))
        }
        _ if expected == got => None,
        _ => Some(format!("{path}: expected {}, got {}", shown(&expected.to_string()), shown(&got.to_string()))),
    }
}

/// Events are compared whole: the first differing event is shown entire, with both counts.
fn events_difference(expected: &[Value], got: &[Value]) -> Option<String> {
    let counts = format!("({} events expected, {} emitted)", expected.len(), got.len());
    let index = expected
        .iter()
        .zip(got)
        .position(|(e, g)| e != g)
        .or_else(|| (expected.len() != got.len()).then(|| expected.len().min(got.len())))?;
    let show = |event: Option<&Value>| event.map_or_else(|| "nothing".to_owned(), |e| shown(&e.to_string()));
    Some(format!("events[{index}]: expected {}, got {} {counts}", show(expected.get(index)), show(got.get(index))))
}

fn shown(text: &str) -> String {
    if text.chars().count() <= SHOWN_CHARS {
        return text.to_owned();
    }
    let head: String = text.chars().take(SHOWN_CHARS).collect();
    format!("{head}… ({} chars)", text.chars().count())
}

fn shown_opt(text: Option<&str>) -> String {
    text.map_or_else(|| "(none)".to_owned(), shown)
}
