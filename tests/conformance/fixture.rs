//! The fixtures: `tests/fixtures/providers/<provider>/<case>.<ext>` (the recorded body) and
//! `<case>.expect.json` (how to replay it and what the driver must produce; the format is in
//! `tests/fixtures/providers/README.md`).
//!
//! Loading is strict: an unknown key, a malformed event, a case without a body, a body without a
//! case or two bodies for one case are errors naming the file, so a typo can never turn a check
//! off silently.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

/// The fixtures folder of one provider.
pub fn folder(provider: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/providers").join(provider)
}

/// One recorded response and what the driver must make of it.
#[derive(Debug)]
pub struct Fixture {
    /// `<provider>/<case>`, for messages.
    pub name: String,
    /// The recorded body, replayed as it is.
    pub body: PathBuf,
    /// Frame size for the replay; `None` sends the body whole.
    pub chunk_bytes: Option<usize>,
    /// HTTP status of the replay.
    pub status: u16,
    /// `content-type` of the replay.
    pub content_type: String,
    /// `passed`, `failed` or `error`.
    pub tool_status: String,
    /// The neutral response, without `error_contains`.
    pub response: Value,
    /// Substrings the response's `error` (and the result's summary) must contain.
    pub error_contains: Vec<String>,
    /// The exact event sequence, each `[kind, ...]`.
    pub events: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ExpectFile {
    #[serde(rename = "_comment")]
    _comment: Option<String>,
    chunk_bytes: Option<usize>,
    status: Option<u16>,
    content_type: Option<String>,
    tool_status: String,
    response: Value,
    events: Vec<Value>,
}

const EXPECT_SUFFIX: &str = ".expect.json";

/// Every fixture of `provider`, sorted by case name.
pub fn load_all(provider: &str) -> Result<Vec<Fixture>, String> {
    let dir = folder(provider);
    let entries = std::fs::read_dir(&dir).map_err(|e| format!("cannot list {}: {e}", dir.display()))?;
    let mut expects = BTreeMap::new();
    let mut bodies: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
    for entry in entries {
        let path = entry.map_err(|e| format!("cannot list {}: {e}", dir.display()))?.path();
        let file = path
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| format!("{} has no UTF-8 name", path.display()))?
            .to_owned();
        if let Some(case) = file.strip_suffix(EXPECT_SUFFIX) {
            expects.insert(case.to_owned(), path);
        } else {
            let case = file.split('.').next().unwrap_or_default().to_owned();
            bodies.entry(case).or_default().push(path);
        }
    }
    if let Some(orphan) = bodies.keys().find(|case| !expects.contains_key(*case)) {
        return Err(format!("{provider}/{orphan}: a recorded body without {orphan}{EXPECT_SUFFIX}"));
    }
    expects
        .into_iter()
        .map(|(case, expect)| load(provider, &case, &expect, bodies.remove(&case).unwrap_or_default()))
        .collect()
}

fn load(provider: &str, case: &str, expect: &Path, bodies: Vec<PathBuf>) -> Result<Fixture, String> {
    let name = format!("{provider}/{case}");
    if case.contains('.') {
        return Err(format!("{name}: case names contain no dot"));
    }
    let body = match <[PathBuf; 1]>::try_from(bodies) {
        Ok([body]) => body,
        Err(found) => {
            return Err(format!(
                "{name}: needs exactly one recorded body beside {case}{EXPECT_SUFFIX}, found {}",
                found.len()
            ));
        }
    };
    let text = std::fs::read_to_string(expect).map_err(|e| format!("{name}: cannot read {}: {e}", expect.display()))?;
    let file: ExpectFile =
        serde_json::from_str(&text).map_err(|e| format!("{name}: {case}{EXPECT_SUFFIX} is malformed: {e}"))?;
    if !["passed", "failed", "error"].contains(&file.tool_status.as_str()) {
        return Err(format!("{name}: tool_status must be passed, failed or error, not {:?}", file.tool_status));
    }
    if file.chunk_bytes == Some(0) {
        return Err(format!("{name}: chunk_bytes must be at least 1"));
    }
    for (index, event) in file.events.iter().enumerate() {
        check_event(event).map_err(|why| format!("{name}: events[{index}] {event}: {why}"))?;
    }
    let mut response = file.response;
    let error_contains =
        take_error_contains(&mut response).map_err(|why| format!("{name}: response.error_contains {why}"))?;
    if !response.is_object() {
        return Err(format!("{name}: response must be an object"));
    }
    let json_body = body.extension().is_some_and(|e| e == "json");
    let content_type = file
        .content_type
        .unwrap_or_else(|| if json_body { "application/json" } else { "text/event-stream" }.to_owned());
    Ok(Fixture {
        name,
        body,
        chunk_bytes: file.chunk_bytes,
        status: file.status.unwrap_or(200),
        content_type,
        tool_status: file.tool_status,
        response,
        error_contains,
        events: file.events,
    })
}

/// An event is `["chunk"|"thinking", text]`, `["tool_call_started", id, name]` or
/// `["tool_call_input_bytes", id, count]`.
fn check_event(event: &Value) -> Result<(), &'static str> {
    let items = event.as_array().ok_or("is not an array")?;
    let text = |i: usize| items.get(i).is_some_and(Value::is_string);
    let ok = match items.first().and_then(Value::as_str) {
        Some("chunk" | "thinking") => items.len() == 2 && text(1),
        Some("tool_call_started") => items.len() == 3 && text(1) && text(2),
        Some("tool_call_input_bytes") => items.len() == 3 && text(1) && items[2].is_u64(),
        _ => return Err("has an unknown kind"),
    };
    if ok { Ok(()) } else { Err("has the wrong arguments for its kind") }
}

fn take_error_contains(response: &mut Value) -> Result<Vec<String>, &'static str> {
    let Some(object) = response.as_object_mut() else { return Ok(Vec::new()) };
    match object.remove("error_contains") {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(vec![s]),
        Some(Value::Array(items)) => {
            items.into_iter().map(|v| v.as_str().map(str::to_owned).ok_or("must hold strings")).collect()
        }
        Some(_) => Err("must be a string or a list of strings"),
    }
}
