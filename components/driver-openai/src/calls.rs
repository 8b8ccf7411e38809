//! Tool calls of one response, rebuilt from pieces keyed by `index`.
//!
//! Chat Completions streams a tool call as pieces (`delta.tool_calls[]`)
//! that share an `index`; several calls may interleave (parallel tool
//! calls). The first piece of an index normally carries the call's `id` and
//! `function.name`; every piece may carry a fragment of `function.arguments`
//! (a JSON text). [`Calls`] keeps one entry per index, reports
//! `tool-call-started` once per call and, after each arguments fragment,
//! the cumulative byte count of the call's arguments so far.
//!
//! Guarantees: a call is started exactly once, as soon as it has a name,
//! and progress is never reported for a call before its start; [`Calls::finish`]
//! returns the calls in index order and keeps only those whose arguments
//! parse as JSON (an empty string counts as `{}`), naming the first bad
//! one in the error.
//!
//! Deliberately lenient, for OpenAI-compatible local servers: a call with no
//! `id` by the time it starts gets `call_<index>`; an `id` or `name` repeated
//! on later pieces is ignored rather than appended; an `arguments` value that
//! is not a string is taken as its JSON text. Not done: arguments are not
//! checked against the tool's schema (the runtime's job).

use crate::assemble::Sink;
use guest_http::flat::Flat;
use serde_json::{Value, json};
use std::borrow::Cow;
use std::collections::BTreeMap;

struct Call {
    id: String,
    /// The id is `call_<index>`, made up because no piece carried one yet.
    made_up_id: bool,
    name: String,
    arguments: String,
    started: bool,
}

/// One piece of a call, as found in a chunk or a whole message.
pub struct Piece<'a> {
    pub index: u64,
    pub id: Option<Cow<'a, str>>,
    pub name: Option<Cow<'a, str>>,
    pub arguments: Option<String>,
}

impl<'a> Piece<'a> {
    /// Read a `tool_calls[]` entry; `position` (its place in the array) is
    /// the index when the entry carries none.
    pub fn from_json(entry: &'a Value, position: usize) -> Self {
        let text = |v: Option<&'a Value>| v.and_then(Value::as_str).filter(|s| !s.is_empty()).map(Cow::Borrowed);
        let arguments = match entry.pointer("/function/arguments") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(other) => Some(other.to_string()),
        };
        Piece {
            index: entry.get("index").and_then(Value::as_u64).unwrap_or(position as u64),
            id: text(entry.get("id")),
            name: text(entry.pointer("/function/name")),
            arguments,
        }
    }

    /// [`Piece::from_json`] for an entry of a streamed chunk read as a [`Flat`]: the same
    /// piece from the same text.
    pub fn from_flat(entry: &Flat<'a>, position: usize) -> Self {
        let text = |v: Option<Cow<'a, str>>| v.filter(|s| !s.is_empty());
        let function = entry.object("function");
        let arguments = match function.as_ref().and_then(|f| f.raw("arguments")) {
            None | Some("null") => None,
            Some(json) if json.starts_with('"') => {
                function.as_ref().and_then(|f| f.str("arguments")).map(Cow::into_owned)
            }
            // Rare: not a string. Its text as `Value` writes it (keys sorted, numbers normalized).
            Some(json) => serde_json::from_str::<Value>(json).ok().map(|v| v.to_string()),
        };
        Piece {
            index: entry.u64("index").unwrap_or(position as u64),
            id: text(entry.str("id")),
            name: text(function.as_ref().and_then(|f| f.str("name"))),
            arguments,
        }
    }
}

#[derive(Default)]
pub struct Calls {
    by_index: BTreeMap<u64, Call>,
}

impl Calls {
    /// Apply one piece, reporting a start and progress to `sink`.
    pub fn piece<S: Sink>(&mut self, piece: Piece<'_>, sink: &mut S) {
        let call = self.by_index.entry(piece.index).or_insert_with(|| Call {
            id: format!("call_{}", piece.index),
            made_up_id: true,
            name: String::new(),
            arguments: String::new(),
            started: false,
        });
        if let (Some(id), true, false) = (piece.id, call.made_up_id, call.started) {
            call.id = id.to_string();
            call.made_up_id = false;
        }
        if let (true, Some(name)) = (call.name.is_empty(), piece.name) {
            call.name = name.to_string();
        }
        if !call.started && !call.name.is_empty() {
            call.started = true;
            sink.tool_started(&call.id, &call.name);
            if !call.arguments.is_empty() {
                sink.tool_bytes(&call.id, call.arguments.len() as u64);
            }
        }
        if let Some(fragment) = piece.arguments {
            call.arguments.push_str(&fragment);
            if call.started {
                sink.tool_bytes(&call.id, call.arguments.len() as u64);
            }
        }
    }

    /// The neutral `tool_call` blocks in index order, and the first call
    /// that could not become one.
    pub fn finish(&self) -> (Vec<Value>, Option<String>) {
        let mut blocks = Vec::new();
        let mut error = None;
        for call in self.by_index.values() {
            match block(call) {
                Ok(b) => blocks.push(b),
                Err(e) => {
                    error.get_or_insert(e);
                }
            }
        }
        (blocks, error)
    }
}

/// One finished call as a neutral block; empty arguments mean `{}`.
fn block(call: &Call) -> Result<Value, String> {
    if call.name.is_empty() {
        return Err(format!("tool call {} has no function name", call.id));
    }
    let input = if call.arguments.trim().is_empty() {
        json!({})
    } else {
        serde_json::from_str::<Value>(&call.arguments)
            .map_err(|e| format!("tool call {} ({}): arguments are not valid JSON: {e}", call.id, call.name))?
    };
    Ok(json!({"type": "tool_call", "id": call.id, "name": call.name, "input": input}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::assemble::tests::Record;

    fn piece(index: u64, id: Option<&'static str>, name: Option<&'static str>, args: Option<&str>) -> Piece<'static> {
        Piece { index, id: id.map(Cow::Borrowed), name: name.map(Cow::Borrowed), arguments: args.map(str::to_string) }
    }

    #[test]
    fn interleaved_calls_come_out_in_index_order() {
        let mut rec = Record::default();
        let mut calls = Calls::default();
        calls.piece(piece(1, Some("b"), Some("two"), Some("")), &mut rec);
        calls.piece(piece(0, Some("a"), Some("one"), Some("{\"x\"")), &mut rec);
        calls.piece(piece(1, Some("b"), Some("two"), Some("[1]")), &mut rec);
        calls.piece(piece(0, None, None, Some(":1}")), &mut rec);
        let (blocks, error) = calls.finish();
        assert_eq!(error, None);
        assert_eq!(
            blocks,
            vec![
                json!({"type": "tool_call", "id": "a", "name": "one", "input": {"x": 1}}),
                json!({"type": "tool_call", "id": "b", "name": "two", "input": [1]}),
            ]
        );
        assert_eq!(rec.0, ["start b two", "bytes b 0", "start a one", "bytes a 4", "bytes b 3", "bytes a 7"]);
    }

    #[test]
    fn missing_id_and_late_name() {
        let mut rec = Record::default();
        let mut calls = Calls::default();
        calls.piece(piece(3, None, None, Some("{}")), &mut rec);
        assert!(rec.0.is_empty(), "no start without a name");
        calls.piece(piece(3, None, Some("late"), None), &mut rec);
        assert_eq!(rec.0, ["start call_3 late", "bytes call_3 2"]);
        calls.piece(piece(3, Some("too-late"), Some("renamed"), Some("")), &mut rec);
        calls.piece(piece(5, None, None, None), &mut rec);
        calls.piece(piece(5, Some("real"), Some("n"), None), &mut rec);
        assert_eq!(rec.0[2..], ["bytes call_3 2", "start real n"]);
        let (blocks, _) = calls.finish();
        assert_eq!(blocks[0], json!({"type": "tool_call", "id": "call_3", "name": "late", "input": {}}));
    }

    #[test]
    fn bad_arguments_and_nameless_calls_are_named_and_dropped() {
        let mut rec = Record::default();
        let mut calls = Calls::default();
        calls.piece(piece(0, Some("ok"), Some("fine"), None), &mut rec);
        calls.piece(piece(1, Some("bad"), Some("broken"), Some("{nope")), &mut rec);
        calls.piece(piece(2, Some("anon"), None, Some("{}")), &mut rec);
        let (blocks, error) = calls.finish();
        assert_eq!(blocks, vec![json!({"type": "tool_call", "id": "ok", "name": "fine", "input": {}})]);
        let error = error.unwrap();
        assert!(error.starts_with("tool call bad (broken): arguments are not valid JSON"), "{error}");
    }

    #[test]
    fn pieces_from_json() {
        let entry =
            json!({"index": 2, "id": "x", "type": "function", "function": {"name": "n", "arguments": {"a": 1}}});
        let p = Piece::from_json(&entry, 0);
        assert_eq!(
            (p.index, p.id.as_deref(), p.name.as_deref(), p.arguments.as_deref()),
            (2, Some("x"), Some("n"), Some("{\"a\":1}"))
        );
        let entry = json!({"function": {"arguments": "{"}});
        let p = Piece::from_json(&entry, 4);
        assert_eq!((p.index, p.id.as_deref(), p.name.as_deref(), p.arguments.as_deref()), (4, None, None, Some("{")));
    }

    /// A streamed entry read as a `Flat` gives the piece its `Value` gives.
    #[test]
    fn pieces_from_flat_are_pieces_from_json() {
        for text in [
            r#"{"index":2,"id":"x","type":"function","function":{"name":"n","arguments":"{\"a\":1}"}}"#,
            r#"{"index":2,"id":"x","function":{"name":"n","arguments":{"b":1,"a":2.50,"c":[1e2]}}}"#,
            r#"{"function":{"arguments":"{"}}"#,
            r#"{"function":{"arguments":null,"name":""},"id":""}"#,
            r#"{"function":{"arguments":7},"index":"3"}"#,
            r#"{"function":[1],"index":-1,"id":"q\"\u00e9"}"#,
            r#"{"function":"f","index":1.0,"id":5}"#,
            r#"{"function":{"name":"a\nb","name":"last","arguments":"x","arguments":"y"}}"#,
            r#"{}"#,
            r#"[]"#,
        ] {
            let value: Value = serde_json::from_str(text).unwrap();
            let flat = Flat::parse(text).unwrap();
            for position in [0, 9] {
                let (a, b) = (Piece::from_json(&value, position), Piece::from_flat(&flat, position));
                assert_eq!(
                    (a.index, a.id, a.name, a.arguments),
                    (b.index, b.id, b.name, b.arguments),
                    "{text} at {position}"
                );
            }
        }
    }
}
