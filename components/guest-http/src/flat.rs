//! A JSON document read as `serde_json::Value` would read it, without building the tree: its
//! top-level keys, each with its value's text borrowed from the input, and nested objects read
//! the same way when asked for.
//!
//! What it is for: a provider's stream sends a dozen small events per answer, and a driver
//! looks at a few fields of each. Reading every event into a `Value` built a map and a string
//! per field only to drop them; a [`Flat`] keeps slices of the event's text.
//!
//! Guarantees, the same as reading the text into a `Value` and asking it:
//! - [`Flat::parse`] accepts exactly the documents `serde_json::from_str::<Value>` accepts
//!   (the [`crate::scan`] rules), and refuses the others with serde_json's own error;
//! - [`Flat::get`] is `Value::get` on an object: the last of duplicate keys wins, and a
//!   document that is not an object has no keys;
//! - [`Flat::str`] is `Value::as_str` (decoded, borrowed when the string holds no escape),
//!   [`Flat::u64`] is `Value::as_u64` (an integer literal in range: not `1.0`, not `1e2`, not
//!   negative, not `-0`), [`Flat::object`] is `Value::get` followed by reading that value as an
//!   object, [`Flat::items`] is `Value::as_array` (each element's text, read on with
//!   [`Flat::of`]).
//!
//! Deliberately not done: other number types, or a value's decoded form beyond a string: a
//! caller that needs a whole subtree asks serde_json for it from [`Flat::raw`].

use std::borrow::Cow;

use crate::lenient::Raw;
use crate::scan::{Refused, Scan, decoded};

/// An object's keys and their values' text (no keys when the document is not an object).
#[derive(Debug, Default)]
pub struct Flat<'a> {
    fields: Vec<(Cow<'a, str>, &'a str)>,
}

impl<'a> Flat<'a> {
    /// Read a document, checked whole. The error is serde_json's, as `Value` reports it.
    pub fn parse(text: &'a str) -> Result<Self, serde_json::Error> {
        crate::scan::whole(text, Self::read)
    }

    /// A value's text already checked (a value of another `Flat`), read as an object: its
    /// keys, or none when it is not an object.
    pub fn of(json: &'a str) -> Self {
        Self::read(&mut Scan::new(json)).unwrap_or_default()
    }

    /// The next value of `scan`: its keys when it is an object, none otherwise.
    fn read(scan: &mut Scan<'a>) -> Result<Self, Refused> {
        let mut fields = Vec::new();
        if scan.peek() == Some(b'{') {
            scan.object(|scan, key| {
                fields.push((key, scan.raw()?));
                Ok(())
            })?;
        } else {
            scan.raw()?;
        }
        Ok(Flat { fields })
    }

    /// The text of `key`'s value (the last one, when the key is repeated).
    pub fn raw(&self, key: &str) -> Option<&'a str> {
        self.fields.iter().rev().find(|(k, _)| k == key).map(|(_, v)| *v)
    }

    /// `key`'s value as a [`Raw`].
    pub fn get(&self, key: &str) -> Option<Raw<'a>> {
        self.raw(key).map(Raw::checked)
    }

    /// `key`'s value as a string, decoded.
    pub fn str(&self, key: &str) -> Option<Cow<'a, str>> {
        let json = self.raw(key)?;
        if json.starts_with('"') { decoded(json).ok() } else { None }
    }

    /// `key`'s value as a non-negative integer.
    pub fn u64(&self, key: &str) -> Option<u64> {
        self.raw(key)?.parse().ok()
    }

    /// `key`'s value read as an object (`None` when absent; no keys when not an object).
    pub fn object(&self, key: &str) -> Option<Flat<'a>> {
        self.raw(key).map(Flat::of)
    }

    /// `key`'s value as an array: its elements' text (`None` when absent or not an array).
    pub fn items(&self, key: &str) -> Option<Vec<&'a str>> {
        let json = self.raw(key)?;
        if !json.starts_with('[') {
            return None;
        }
        let mut items = Vec::new();
        // The text was checked when this object was read.
        Scan::new(json)
            .array(|scan| {
                items.push(scan.raw()?);
                Ok(())
            })
            .ok()?;
        Some(items)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    /// Every question a driver asks, answered by `Flat` and by `Value`, must agree.
    fn agrees(text: &str) {
        let value = serde_json::from_str::<Value>(text);
        let flat = Flat::parse(text);
        match (&value, &flat) {
            (Err(a), Err(b)) => assert_eq!(a.to_string(), b.to_string(), "{text}"),
            (Ok(_), Ok(_)) => {}
            _ => panic!("{text}: Value {value:?}, Flat {flat:?}"),
        }
        let (Ok(value), Ok(flat)) = (value, flat) else { return };
        for key in ["type", "index", "n", "a\"b", "é", "o", ""] {
            assert_eq!(flat.str(key).as_deref(), value.get(key).and_then(Value::as_str), "{text} {key}");
            assert_eq!(flat.u64(key), value.get(key).and_then(Value::as_u64), "{text} {key}");
            let items = flat.items(key);
            let array = value.get(key).and_then(Value::as_array);
            assert_eq!(items.as_ref().map(Vec::len), array.map(Vec::len), "{text} {key}");
            for (item, element) in items.iter().flatten().zip(array.into_iter().flatten()) {
                let item = Flat::of(item);
                for k in ["index", "type"] {
                    assert_eq!(item.u64(k), element.get(k).and_then(Value::as_u64), "{text} {key}[].{k}");
                    assert_eq!(item.str(k).as_deref(), element.get(k).and_then(Value::as_str), "{text} {key}[].{k}");
                }
            }
            let inner = value.get(key);
            let nested = flat.object(key);
            assert_eq!(nested.is_some(), inner.is_some(), "{text} {key}");
            if let (Some(nested), Some(inner)) = (nested, inner) {
                for k in ["type", "n", "x"] {
                    assert_eq!(nested.str(k).as_deref(), inner.get(k).and_then(Value::as_str), "{text} {key}.{k}");
                    assert_eq!(nested.u64(k), inner.get(k).and_then(Value::as_u64), "{text} {key}.{k}");
                }
            }
        }
    }

    #[test]
    fn answers_what_a_value_would() {
        for text in [
            r#"{"type":"message_start","index":0}"#,
            r#"{"type":"a","type":"b","index":1,"index":"2"}"#,
            r#"{"index":-0}"#,
            r#"{"index":-1,"n":1.0,"o":1e2}"#,
            r#"{"index":18446744073709551615,"n":18446744073709551616}"#,
            r#"{"a\"b":"q\"x","\u00e9":"\u00e9\ud83d\ude00","":"empty"}"#,
            r#"{"o":{"type":"text","n":3,"x":{"deep":[1,2]}},"type":{"type":"x"}}"#,
            r#"{"o":[1,2],"n":null,"type":true}"#,
            r#"{"o":[{"index":1,"type":"a"},{"index":0},7,"s",[],{"index":"0"}],"index":[]}"#,
            r#"{"o":[ { "index" : 2 } , null ],"type":[[{"index":1}]]}"#,
            r#"{"o":"{\"type\":\"not an object\"}"}"#,
            r#" { "type" : "spaced" , "index" : 7 } "#,
            r#"[{"type":"in an array"}]"#,
            r#""type""#,
            "7",
            "null",
            r#"{"type":"x""#,
            r#"{"type":"x",}"#,
            r#"{"index":01}"#,
            r#"{"n":1e400}"#,
            r#"{"type":"\ud800"}"#,
            r#"{"type":"ctl	char"}"#,
            "",
            "{} {}",
        ] {
            agrees(text);
        }
    }
}
