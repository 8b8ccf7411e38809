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

use crate::cursor::Cursor;
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
        if let Some(flat) = Self::read_compact(scan) {
            return Ok(flat);
        }
        Self::read_general(scan)
    }

    /// An object in compact form (no whitespace, unescaped keys) read through a [`Cursor`],
    /// which passes its values faster than the general scanner; `None` (with `scan` untouched)
    /// for anything else, which the general reading then reads. Providers stream compact JSON,
    /// so this is the common case.
    fn read_compact(scan: &mut Scan<'a>) -> Option<Self> {
        scan.peek();
        let mut c = Cursor::new(scan.text(), scan.position(), scan.depth());
        if c.byte()? != b'{' || !c.room_for(1) {
            return None;
        }
        // The values sit inside this object.
        let depth = scan.depth() + 1;
        let mut fields = Vec::new();
        c.eat(b'{')?;
        if !c.empty(b'}')? {
            loop {
                let key = c.key_str()?;
                fields.push((Cow::Borrowed(key), c.value(depth)?));
                if !c.next(b'}')? {
                    break;
                }
            }
        }
        scan.skip_to(c.position());
        Some(Flat { fields })
    }

    fn read_general(scan: &mut Scan<'a>) -> Result<Self, Refused> {
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

    /// The compact reading against the general one on `text`: the same fields and the same end
    /// whenever it answers, and no answer where the general one refuses. Whether it answered.
    fn compact_agrees(text: &str) -> bool {
        let mut general_scan = Scan::new(text);
        let general = Flat::read_general(&mut general_scan);
        let mut fast_scan = Scan::new(text);
        let Some(fast) = Flat::read_compact(&mut fast_scan) else { return false };
        match general {
            Ok(general) => {
                assert_eq!(format!("{:?}", fast.fields), format!("{:?}", general.fields), "{text}");
                assert_eq!(fast_scan.position(), general_scan.position(), "{text}");
            }
            Err(_) => panic!("the compact reading read what the general one refuses: {text}"),
        }
        true
    }

    #[test]
    fn the_compact_reading_is_the_general_one_on_every_cut_and_one_byte_change() {
        let events = [
            r#"{"message":{"content":[],"id":"msg_1","model":"m","role":"assistant","stop_reason":null,"usage":{"input_tokens":10,"output_tokens":1}},"type":"message_start"}"#,
            r#"{"delta":{"partial_json":"{\"op\":\"list\",\"pa","type":"input_json_delta"},"index":1,"type":"content_block_delta"}"#,
            r#"{"delta":{"text":"h\u00e9 \n\"q\"","type":"text_delta"},"index":0,"type":"content_block_delta"}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{}"}}]},"index":0,"finish_reason":null}],"usage":{"prompt_tokens":-1,"n":1.5e3,"t":true,"f":false}}"#,
            r#"{"a":{},"b":[],"c":"","type":"x","type":"y"}"#,
            "{}",
        ];
        let (mut tried, mut answered) = (0, 0);
        for text in events {
            assert!(compact_agrees(text), "{text}");
            for end in (0..=text.len()).filter(|&e| text.is_char_boundary(e)) {
                compact_agrees(&text[..end]);
            }
            for at in (0..text.len()).filter(|&at| text.as_bytes()[at].is_ascii()) {
                for with in [b'"', b'\\', b',', b'}', b']', b'{', b'[', b':', b' ', 0x01, b'x', b'0', b'-', b'n', b't']
                {
                    let mut changed = text.as_bytes().to_vec();
                    changed[at] = with;
                    if let Ok(changed) = String::from_utf8(changed) {
                        tried += 1;
                        answered += usize::from(compact_agrees(&changed));
                    }
                }
            }
        }
        assert!(answered > tried / 10, "the compact reading answered {answered} of {tried}");
    }

    #[test]
    fn deep_objects_keep_the_nesting_limit() {
        for levels in [125, 126, 127, 128, 130] {
            let text =
                format!("{}{}", r#"{"a":"#.repeat(levels), "}".repeat(levels)).replacen(r#"{"a":}"#, r#"{"a":1}"#, 1);
            let general = Flat::read_general(&mut Scan::new(&text)).is_ok();
            let fast = Flat::read_compact(&mut Scan::new(&text));
            assert!(fast.is_none() || general, "{levels}");
            agrees(&text);
        }
    }
}
