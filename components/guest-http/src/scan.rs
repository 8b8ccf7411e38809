//! A one-pass JSON scanner over borrowed text: the byte-level reading under
//! [`crate::lenient`].
//!
//! [`Scan`] walks the text once. It checks every value it passes and hands
//! back each value's text as a borrowed slice, so the drivers copy strings,
//! ids and tool inputs into the provider body without decoding them. Objects
//! and arrays are read through callbacks ([`Scan::object`], [`Scan::array`]),
//! so a reader descends only where it wants fields and skips the rest.
//!
//! Guarantees: a document is accepted exactly when
//! `serde_json::from_str::<serde_json::Value>` accepts it. The grammar is
//! RFC 8259's, with serde_json's limits on top:
//! - at most 127 nested containers (serde_json's recursion limit of 128 is
//!   used up by the 128th);
//! - a number must be finite as an `f64`;
//! - a `\u` escape must not leave a lone surrogate.
//!
//! The last two are checked by serde_json itself, on the literal alone, and
//! only for a number that is not a short integer or a string that holds a
//! `\u` escape. These are rare in a neutral request, so the common path
//! never calls serde_json.
//!
//! Deliberately not done: error messages. A refusal is [`Refused`]; the
//! caller asks serde_json for the message `Value` would give.

use std::borrow::Cow;

/// The text is not a JSON document `Value` would accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused;

/// The deepest nesting serde_json accepts.
pub(crate) const MAX_DEPTH: u32 = 127;

/// A position in a JSON text and the containers open around it.
pub struct Scan<'a> {
    text: &'a str,
    at: usize,
    depth: u32,
    /// Where [`compact::skip`] may be tried again: past the point it last gave up at, so that
    /// no byte is tried by it twice.
    compact_from: usize,
}

impl<'a> Scan<'a> {
    pub fn new(text: &'a str) -> Self {
        Scan { text, at: 0, depth: 0, compact_from: 0 }
    }

    /// A scan of `text` resumed at byte `at`, inside `depth` open containers.
    pub(crate) fn resume(text: &'a str, at: usize, depth: u32) -> Self {
        Scan { text, at, depth, compact_from: 0 }
    }

    /// The text scanned.
    pub(crate) fn text(&self) -> &'a str {
        self.text
    }

    /// Where the scan is (a byte offset).
    pub(crate) fn position(&self) -> usize {
        self.at
    }

    /// Containers open around the position.
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    /// Move on to `at`, after text read elsewhere (and checked there).
    pub(crate) fn skip_to(&mut self, at: usize) {
        self.at = at;
    }

    /// Whether `text` is one JSON value, with only whitespace around it.
    pub fn document(text: &str) -> bool {
        let mut scan = Scan::new(text);
        scan.raw().is_ok() && scan.end().is_ok()
    }

    #[inline(always)]
    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    #[inline(always)]
    fn ws(&mut self) {
        let bytes = self.bytes();
        // Every byte above the space is not whitespace: one compare for the
        // common case (compact JSON), the four-way test only below it.
        while let Some(&b) = bytes.get(self.at) {
            if b > b' ' || !matches!(b, b' ' | b'\t' | b'\n' | b'\r') {
                break;
            }
            self.at += 1;
        }
    }

    /// The first byte of the next value (after whitespace), not consumed.
    #[inline(always)]
    pub fn peek(&mut self) -> Option<u8> {
        self.ws();
        self.bytes().get(self.at).copied()
    }

    /// Only whitespace is left.
    pub fn end(&mut self) -> Result<(), Refused> {
        if self.peek().is_none() { Ok(()) } else { Err(Refused) }
    }

    fn eat(&mut self, byte: u8) -> Result<(), Refused> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(Refused)
        }
    }

    /// Pass the next value, checked; its text, without the whitespace
    /// around it.
    pub fn raw(&mut self) -> Result<&'a str, Refused> {
        self.ws();
        let start = self.at;
        // A container in compact form is passed in one loop; anything that loop does not
        // know, by the recursive reading below.
        if start >= self.compact_from && matches!(self.bytes().get(start), Some(b'{' | b'[')) {
            match compact::skip(self.bytes(), start, self.depth) {
                Ok(end) => {
                    self.at = end;
                    return Ok(&self.text[start..end]);
                }
                Err(gave_up_at) => self.compact_from = gave_up_at.max(start + 1),
            }
        }
        self.value()?;
        Ok(&self.text[start..self.at])
    }

    fn value(&mut self) -> Result<(), Refused> {
        match self.peek().ok_or(Refused)? {
            b'"' => self.string().map(drop),
            b'{' => self.object(|scan, _| scan.raw().map(drop)),
            b'[' => self.array(|scan| scan.raw().map(drop)),
            b't' => self.literal("true"),
            b'f' => self.literal("false"),
            b'n' => self.literal("null"),
            b'-' | b'0'..=b'9' => self.number(),
            _ => Err(Refused),
        }
    }

    fn literal(&mut self, word: &str) -> Result<(), Refused> {
        if self.bytes()[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(())
        } else {
            Err(Refused)
        }
    }

    fn digits(&mut self) -> usize {
        let start = self.at;
        while self.bytes().get(self.at).is_some_and(u8::is_ascii_digit) {
            self.at += 1;
        }
        self.at - start
    }

    fn number(&mut self) -> Result<(), Refused> {
        let start = self.at;
        if self.bytes()[self.at] == b'-' {
            self.at += 1;
        }
        let first = self.bytes().get(self.at).copied();
        let whole = self.digits();
        if whole == 0 || (first == Some(b'0') && whole > 1) {
            return Err(Refused);
        }
        let mut plain = whole <= 18;
        if self.bytes().get(self.at) == Some(&b'.') {
            self.at += 1;
            if self.digits() == 0 {
                return Err(Refused);
            }
            plain = false;
        }
        if let Some(b'e' | b'E') = self.bytes().get(self.at) {
            self.at += 1;
            if let Some(b'+' | b'-') = self.bytes().get(self.at) {
                self.at += 1;
            }
            if self.digits() == 0 {
                return Err(Refused);
            }
            plain = false;
        }
        // A short integer is always in range; anything else may overflow an
        // `f64`, which serde_json refuses: let it judge the literal.
        if plain || serde_json::from_str::<serde_json::Value>(&self.text[start..self.at]).is_ok() {
            Ok(())
        } else {
            Err(Refused)
        }
    }

    /// Pass a string; its literal, quotes included.
    pub fn string(&mut self) -> Result<&'a str, Refused> {
        self.string_escaped().map(|(literal, _)| literal)
    }

    /// Pass a string; its literal, and whether it holds an escape.
    #[inline(always)]
    fn string_escaped(&mut self) -> Result<(&'a str, bool), Refused> {
        self.ws();
        let start = self.at;
        let bytes = self.bytes();
        if bytes.get(start) != Some(&b'"') {
            return Err(Refused);
        }
        let mut i = start + 1;
        let mut escaped = false;
        loop {
            i = plain_run(bytes, i);
            match bytes.get(i) {
                Some(b'"') => break,
                Some(b'\\') => match bytes.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => {
                        escaped = true;
                        i += 2;
                    }
                    Some(b'u') => return self.unicode_string(start, i + 2),
                    _ => return Err(Refused),
                },
                // A control character, or the end of the text.
                _ => return Err(Refused),
            }
        }
        self.at = i + 1;
        Ok((&self.text[start..self.at], escaped))
    }

    /// The rest of a string that holds a `\u` escape (rare): scanned like
    /// any other, then its hex digits and surrogate pairs checked by
    /// serde_json. Kept out of line so that the common path carries none of
    /// its weight.
    #[cold]
    #[inline(never)]
    fn unicode_string(&mut self, start: usize, mut i: usize) -> Result<(&'a str, bool), Refused> {
        let bytes = self.bytes();
        loop {
            i = plain_run(bytes, i);
            match bytes.get(i) {
                Some(b'"') => break,
                Some(b'\\') => match bytes.get(i + 1) {
                    Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' | b'u') => i += 2,
                    _ => return Err(Refused),
                },
                _ => return Err(Refused),
            }
        }
        self.at = i + 1;
        let literal = &self.text[start..self.at];
        if serde_json::from_str::<String>(literal).is_err() {
            return Err(Refused);
        }
        Ok((literal, true))
    }

    fn enter(&mut self, open: u8) -> Result<(), Refused> {
        self.eat(open)?;
        self.depth += 1;
        if self.depth > MAX_DEPTH { Err(Refused) } else { Ok(()) }
    }

    /// Read an object: `each` gets every key (decoded) and must pass its
    /// value. The next value must be an object.
    pub fn object(
        &mut self,
        mut each: impl FnMut(&mut Self, Cow<'a, str>) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        self.container(b'{', b'}', |scan| {
            let (literal, escaped) = scan.string_escaped()?;
            let key = if escaped { decoded(literal)? } else { Cow::Borrowed(&literal[1..literal.len() - 1]) };
            scan.eat(b':')?;
            each(scan, key)
        })
    }

    /// Read an array: `each` must pass one element each time it is called.
    /// The next value must be an array.
    pub fn array(&mut self, each: impl FnMut(&mut Self) -> Result<(), Refused>) -> Result<(), Refused> {
        self.container(b'[', b']', each)
    }

    /// `open`, then `item` separated by commas, then `close`.
    fn container(
        &mut self,
        open: u8,
        close: u8,
        mut item: impl FnMut(&mut Self) -> Result<(), Refused>,
    ) -> Result<(), Refused> {
        self.enter(open)?;
        if self.peek() == Some(close) {
            self.at += 1;
        } else {
            loop {
                item(self)?;
                match self.peek() {
                    Some(b',') => self.at += 1,
                    Some(c) if c == close => {
                        self.at += 1;
                        break;
                    }
                    _ => return Err(Refused),
                }
            }
        }
        self.depth -= 1;
        Ok(())
    }
}

#[path = "scan_compact.rs"]
pub(crate) mod compact;

/// Read a whole document with `read` (only whitespace may follow). A refusal becomes
/// serde_json's error for the same text, as reading it into a `Value` reports it.
pub(crate) fn whole<'a, T>(
    text: &'a str,
    read: impl FnOnce(&mut Scan<'a>) -> Result<T, Refused>,
) -> Result<T, serde_json::Error> {
    let mut scan = Scan::new(text);
    match read(&mut scan).and_then(|value| scan.end().map(|()| value)) {
        Ok(value) => Ok(value),
        Err(Refused) => Err(match serde_json::from_str::<serde_json::Value>(text) {
            Err(e) => e,
            Ok(_) => serde::de::Error::custom("the scanner refused a document serde_json accepts"),
        }),
    }
}

/// A checked string literal's content, decoded (borrowed when it holds no
/// escape).
pub fn decoded(literal: &str) -> Result<Cow<'_, str>, Refused> {
    let inner = &literal[1..literal.len() - 1];
    if !inner.contains('\\') {
        return Ok(Cow::Borrowed(inner));
    }
    serde_json::from_str::<String>(literal).map(Cow::Owned).map_err(|_| Refused)
}

/// The index of the first byte at or after `i` that is a quote, a backslash
/// or a control character (or `bytes.len()`). Eight bytes at a time: a byte
/// is flagged by the usual zero-byte test, and the lowest flag is always a
/// true match.
#[inline(always)]
pub(crate) fn plain_run(bytes: &[u8], mut i: usize) -> usize {
    const ONES: u64 = 0x0101_0101_0101_0101;
    const HIGHS: u64 = 0x8080_8080_8080_8080;
    let zero = |x: u64| x.wrapping_sub(ONES) & !x & HIGHS;
    while let Some(chunk) = bytes.get(i..i + 8) {
        let mut word = [0; 8];
        word.copy_from_slice(chunk);
        let v = u64::from_le_bytes(word);
        let flags = zero(v ^ (ONES * u64::from(b'"')))
            | zero(v ^ (ONES * u64::from(b'\\')))
            | (v.wrapping_sub(ONES * 0x20) & !v & HIGHS);
        if flags != 0 {
            return i + (flags.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while bytes.get(i).is_some_and(|&b| b != b'"' && b != b'\\' && b >= 0x20) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value_accepts(text: &str) -> bool {
        serde_json::from_str::<serde_json::Value>(text).is_ok()
    }

    #[test]
    fn accepts_exactly_what_value_accepts() {
        let nested = |d: usize, open: &str, close: &str| format!("{}{}", open.repeat(d), close.repeat(d));
        let mut cases: Vec<String> = [
            "",
            " ",
            "null",
            "nul",
            "nulls",
            "true",
            "false",
            "tru",
            "0",
            "-0",
            "01",
            "-",
            "1.",
            "1.5",
            ".5",
            "1e5",
            "1E+5",
            "1e-5",
            "1e",
            "1e+",
            "+1",
            "1e400",
            "-1e400",
            "1e-400",
            "0e99999",
            "18446744073709551616",
            "999999999999999999",
            "9999999999999999999",
            "\"\"",
            "\"a\"",
            "\"a",
            "\"\\\"\"",
            "\"\\x\"",
            "\"\\u12\"",
            "\"\\u00e9\"",
            "\"\\ud800\"",
            "\"\\udc00\"",
            "\"\\ud83d\\ude00\"",
            "\"\\ud83d\\u0041\"",
            "\"tab\there\"",
            "\"nl\nhere\"",
            "\"\u{7f}\u{e9}\u{1F600}\"",
            "\"\\/\\b\\f\\n\\r\\t\\\\\"",
            "[]",
            "[1,]",
            "[,1]",
            "[1 2]",
            "[1,2]",
            " [ 1 , 2 ] ",
            "{}",
            "{\"a\":1}",
            "{\"a\":1,}",
            "{\"a\" 1}",
            "{1:2}",
            "{\"a\":}",
            "{\"a\":1 \"b\":2}",
            "{\"a\\u0062\":[true,{\"c\":null}]}",
            "{} {}",
            "{}}",
            "[",
            "{",
            "\u{feff}1",
            "1 x",
            "\"0123456789abcdef\\\"0123456789\"",
            "\"0123456789abcdef\u{1}0123456789\"",
            // After a `\\u` escape the rest is read out of line: every other
            // rule still holds there.
            "\"a\\u0041\\n\\\"b 0123456789\"",
            "\"\\u0041\u{1}\"",
            "\"\\u0041",
            "\"\\u0041\\x\"",
            "\"\\u0041\\u00\"",
            "\"\\ud83d\\ude00 and \\ud83d\"",
            "[\"\\u0041\",\"\\t\",1]",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        for d in [1, 126, 127, 128, 200] {
            cases.push(nested(d, "[", "]"));
            cases.push(nested(d, "{\"a\":", "}"));
            cases.push(format!("{{\"x\":{}}}", nested(d, "[", "]")));
        }
        cases.push(format!("1{}", "0".repeat(400)));
        cases.push(format!("1{}", "0".repeat(300)));
        for case in &cases {
            assert_eq!(Scan::document(case), value_accepts(case), "{case:?}");
        }
    }

    /// A document of every kind of value, compact, nested a few levels.
    fn compact_document() -> String {
        concat!(
            r#"{"a":[1,-2,0,-0,123456789012345678,true,false,null,"s",{"k":"v\"\\\/\b\f\n\r\t"}],"#,
            r#""b":{"c":[[],{},[{}],{"d":[[[1]]]}],"e":"é 😀 </x>","f":1.5,"g":1e2,"h":"\u00e9"},"#,
            r#""i":1234567890123456789,"j":[0,10],"k":"","l":{"":[null]}}"#
        )
        .to_string()
    }

    /// The scan with the compact loop on and off agree on `text`, and with serde_json.
    fn compact_agrees(text: &str) {
        assert_eq!(Scan::document(text), value_accepts(text), "{text}");
        let (mut on, mut off) = (Scan::new(text), Scan::new(text));
        off.compact_from = usize::MAX;
        assert_eq!(on.raw(), off.raw(), "{text}");
        assert_eq!(on.position(), off.position(), "{text}");
    }

    /// [`compact_document`] without what the compact loop leaves to the general reading (a
    /// `\u` escape, a fraction, an exponent, a long number): the loop passes it whole.
    const PLAIN: &str = r#"{"a":[1,-2,0,true,false,null,"s\n\"\\\/\b\f\r\t",{"k":[[],{}]}],"b":{"":"é"},"c":[[[10]]]}"#;

    #[test]
    fn the_compact_loop_passes_what_the_general_reading_passes() {
        assert_eq!(compact::skip(PLAIN.as_bytes(), 0, 0), Ok(PLAIN.len()));
        for text in [compact_document(), PLAIN.to_string()] {
            let mut tried = 0;
            for end in 0..=text.len() {
                if text.is_char_boundary(end) {
                    compact_agrees(&text[..end]);
                }
            }
            let bytes = text.as_bytes();
            for at in 0..bytes.len() {
                if !bytes[at].is_ascii() {
                    continue;
                }
                for with in
                    [b'"', b'\\', b',', b':', b'}', b']', b'{', b'[', b' ', 0x01, b'x', b'0', b'-', b'.', b'e', b'u']
                {
                    let mut changed = bytes.to_vec();
                    changed[at] = with;
                    if let Ok(changed) = String::from_utf8(changed) {
                        compact_agrees(&changed);
                        tried += 1;
                    }
                }
            }
            assert!(tried > 1000, "{tried}");
        }
    }

    #[test]
    fn the_compact_loop_counts_nesting_from_the_scans_depth() {
        let nested = |d: usize| format!("{}{}", "[".repeat(d), "]".repeat(d));
        for (depth, levels, ok) in [(0, 127, true), (0, 128, false), (100, 27, true), (100, 28, false), (127, 1, false)]
        {
            let text = nested(levels);
            let general = Scan::resume(&text, 0, depth).raw().is_ok();
            let compact = compact::skip(text.as_bytes(), 0, depth).is_ok();
            assert_eq!((general, compact), (ok, ok), "{levels} levels inside {depth}");
        }
    }

    #[test]
    fn the_eight_byte_skip_stops_at_the_first_special_byte_wherever_it_is() {
        for at in 0..20 {
            for special in [b'"', b'\\', 0x00, 0x1f] {
                let mut bytes = vec![b'a'; 20];
                bytes[at] = special;
                // Bytes above 0x80 and just above the control range are plain.
                bytes[(at + 1) % 20] = if at + 1 < 20 { 0x20 } else { b'a' };
                assert_eq!(plain_run(&bytes, 0), at, "{special:#x} at {at}");
            }
            let plain = vec![0xc3; at];
            assert_eq!(plain_run(&plain, 0), at);
        }
    }

    #[test]
    fn raw_is_the_value_text_without_the_whitespace_around_it() {
        let mut scan = Scan::new(" { \"a\" : [1, 2.50] } ");
        assert_eq!(scan.raw(), Ok("{ \"a\" : [1, 2.50] }"));
        assert_eq!(scan.end(), Ok(()));
        let mut keys = Vec::new();
        let mut scan = Scan::new("{\"k\\\"\":1,\"b\":\"x\",\"\\u0063\\u00e9\":2}");
        scan.object(|s, key| {
            keys.push((key.into_owned(), s.raw()?));
            Ok(())
        })
        .unwrap();
        assert_eq!(keys, [("k\"".to_string(), "1"), ("b".to_string(), "\"x\""), ("c\u{e9}".to_string(), "2")]);
    }
}
