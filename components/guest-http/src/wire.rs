//! Writing a provider request body as JSON text, piece by piece, into a
//! `Vec<u8>`: the drivers' translations build no value tree, they copy the
//! input's [`crate::neutral`] fragments verbatim between keys written here.
//!
//! Guarantees: [`string`] escapes exactly as serde_json does (`"`, `\`,
//! `\b \f \n \r \t`, other control characters as `\u00xx`), so a string the
//! runtime sent comes out as serde_json would have written it; [`comma`]
//! separates members and elements by looking at the last byte written, so
//! a caller can drop a half-written member by truncating back to a mark.
//!
//! Deliberately not done: no validation of what is copied (the fragments
//! were checked when the input was read), no pretty-printing.

/// Write `,` unless the last byte opens an object or an array (or nothing
/// has been written): call before every member or element.
#[inline]
pub fn comma(out: &mut Vec<u8>) {
    if !matches!(out.last(), None | Some(b'{' | b'[')) {
        out.push(b',');
    }
}

/// Write `,"name":`. `name` is written unescaped: it must be a plain
/// ASCII key of the provider's format.
pub fn key(out: &mut Vec<u8>, name: &str) {
    comma(out);
    out.push(b'"');
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\":");
}

/// Write `,"name":` for a key that may need escaping.
pub fn any_key(out: &mut Vec<u8>, name: &str) {
    comma(out);
    string(out, name);
    out.push(b':');
}

/// Write `,"name":json` (`json` copied as it is).
pub fn member(out: &mut Vec<u8>, name: &str, json: &str) {
    key(out, name);
    out.extend_from_slice(json.as_bytes());
}

/// Write `s` as a JSON string literal.
pub fn string(out: &mut Vec<u8>, s: &str) {
    // Escaped into a buffer on the stack, then appended a chunk at a time: a guest's slice copy
    // is a call into the host (`memory.copy`), and a push per byte checks the capacity each time.
    const CHUNK: usize = 32;
    let mut buf = [0u8; 6 * CHUNK];
    out.push(b'"');
    for chunk in s.as_bytes().chunks(CHUNK) {
        let mut n = 0;
        for &b in chunk {
            match ESCAPE[usize::from(b)] {
                0 => {
                    buf[n] = b;
                    n += 1;
                }
                b'u' => {
                    buf[n..n + 6].copy_from_slice(&[
                        b'\\',
                        b'u',
                        b'0',
                        b'0',
                        HEX[usize::from(b >> 4)],
                        HEX[usize::from(b & 0xf)],
                    ]);
                    n += 6;
                }
                short => {
                    buf[n] = b'\\';
                    buf[n + 1] = short;
                    n += 2;
                }
            }
        }
        out.extend_from_slice(&buf[..n]);
    }
    out.push(b'"');
}

const HEX: &[u8; 16] = b"0123456789abcdef";

/// For each byte, 0 when it stands for itself in a string literal, else the letter after the
/// `\\` of its escape (`u` for the `\\u00XX` form).
const ESCAPE: [u8; 256] = {
    let mut table = [0u8; 256];
    let mut b = 0;
    while b < 0x20 {
        table[b] = b'u';
        b += 1;
    }
    table[0x08] = b'b';
    table[0x0c] = b'f';
    table[b'\n' as usize] = b'n';
    table[b'\r' as usize] = b'r';
    table[b'\t' as usize] = b't';
    table[b'"' as usize] = b'"';
    table[b'\\' as usize] = b'\\';
    table
};

/// Write an object: the JSON object text `object` with the `extra`
/// members (`name`, JSON text) put first. `object` must be a valid object.
pub fn object_with(out: &mut Vec<u8>, object: &str, extra: &[(&str, &str)]) {
    let rest = object.strip_prefix('{').unwrap_or("}").trim_start_matches([' ', '\t', '\n', '\r']);
    out.push(b'{');
    for (name, json) in extra {
        member(out, name, json);
    }
    if !rest.starts_with('}') {
        comma(out);
    }
    out.extend_from_slice(rest.as_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(f: impl FnOnce(&mut Vec<u8>)) -> String {
        let mut out = Vec::new();
        f(&mut out);
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn strings_are_escaped_as_serde_json_escapes_them() {
        for s in ["", "plain", "q\"b\\s/", "\n\r\t\u{8}\u{c}\u{1}\u{1f}\u{7f}", "h\u{e9}llo \u{1F600}", "a\u{0}b"] {
            assert_eq!(text(|o| string(o, s)), serde_json::to_string(s).unwrap(), "{s:?}");
        }
        // Longer than the chunks the escaping works in, with escapes and characters of several
        // bytes across their edges.
        let every: String = (0..=0x7fu8).map(char::from).chain("é😀\u{2028}".chars()).collect();
        for s in [every.repeat(3), "\u{1}".repeat(70), "é".repeat(40), "x\"".repeat(50)] {
            assert_eq!(text(|o| string(o, &s)), serde_json::to_string(&s).unwrap(), "{s:?}");
        }
    }

    #[test]
    fn members_and_objects() {
        let t = text(|o| {
            o.push(b'{');
            member(o, "a", "1");
            any_key(o, "k\"");
            object_with(o, "{}", &[("type", "\"object\"")]);
            key(o, "b");
            object_with(o, "{ \"x\": [1] }", &[("type", "\"object\""), ("properties", "{}")]);
            key(o, "c");
            object_with(o, "{\"y\":2}", &[]);
            o.push(b'}');
        });
        assert_eq!(t, r#"{"a":1,"k\"":{"type":"object"},"b":{"type":"object","properties":{},"x": [1] },"c":{"y":2}}"#);
        serde_json::from_str::<serde_json::Value>(&t).unwrap();
    }
}
