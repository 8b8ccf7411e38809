//! A container in compact JSON passed in one loop, without recursion.
//!
//! Why: [`super::Scan::raw`] reads a container by recursion, a closure and a `Result` per
//! value; compiled to wasm that is several hundred instructions per value. The runtime writes
//! compact JSON (tool schemas, tool calls' inputs), so most containers a driver passes over
//! need none of that generality.
//!
//! What it passes: no whitespace anywhere, strings whose escapes are the short ones, numbers
//! that are short integers, `true`, `false`, `null`, and containers of those, the nesting
//! counted from the scan's depth. On anything else it gives up, saying where, and the caller
//! reads the container the general way.
//!
//! Guarantee: when it answers, the general reading of the same text at the same depth accepts
//! it and ends at the same byte (the scan tests compare both, with this loop on and off, over
//! the scanner's case list and every cut and one-byte change of a generated document).

use super::{MAX_DEPTH, plain_run};

/// The end of the container starting at `start` (a `{` or `[`) inside `depth` open
/// containers, or where this loop gave up.
pub(crate) fn skip(bytes: &[u8], start: usize, depth: u32) -> Result<usize, usize> {
    // One bit per open container: set for an object.
    let mut objects: u128 = 0;
    let mut level: u32 = 0;
    let mut i = start;
    loop {
        // A value at `i`.
        match bytes.get(i) {
            Some(b'"') => i = string(bytes, i)?,
            Some(&open @ (b'{' | b'[')) => {
                level += 1;
                if depth + level > MAX_DEPTH || level > 127 {
                    return Err(i);
                }
                let object = open == b'{';
                objects = (objects << 1) | u128::from(object);
                i += 1;
                let close = if object { b'}' } else { b']' };
                if bytes.get(i) == Some(&close) {
                    i += 1;
                    level -= 1;
                    objects >>= 1;
                } else {
                    if object {
                        i = key(bytes, i)?;
                    }
                    continue;
                }
            }
            Some(b't') => i = word(bytes, i, b"true")?,
            Some(b'f') => i = word(bytes, i, b"false")?,
            Some(b'n') => i = word(bytes, i, b"null")?,
            Some(b'-' | b'0'..=b'9') => i = integer(bytes, i)?,
            _ => return Err(i),
        }
        // After a value: close containers, or move to the next value of the innermost.
        loop {
            if level == 0 {
                return Ok(i);
            }
            let object = objects & 1 == 1;
            match bytes.get(i) {
                Some(b',') => {
                    i += 1;
                    if object {
                        i = key(bytes, i)?;
                    }
                    break;
                }
                Some(b'}') if object => {}
                Some(b']') if !object => {}
                _ => return Err(i),
            }
            i += 1;
            level -= 1;
            objects >>= 1;
        }
    }
}

/// A key and its `:`; where the value starts.
#[inline(always)]
fn key(bytes: &[u8], i: usize) -> Result<usize, usize> {
    if bytes.get(i) != Some(&b'"') {
        return Err(i);
    }
    let end = string(bytes, i)?;
    if bytes.get(end) == Some(&b':') { Ok(end + 1) } else { Err(end) }
}

/// A string whose escapes are the short ones; where it ends (or where it stops being one).
#[inline(always)]
pub(crate) fn string(bytes: &[u8], start: usize) -> Result<usize, usize> {
    let mut i = start + 1;
    loop {
        i = plain_run(bytes, i);
        match bytes.get(i) {
            Some(b'"') => return Ok(i + 1),
            Some(b'\\') => match bytes.get(i + 1) {
                Some(b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't') => i += 2,
                // `\u` (serde_json checks its surrogates), or not an escape.
                _ => return Err(i),
            },
            // A control character, or the end of the text.
            _ => return Err(i),
        }
    }
}

/// `word` exactly.
#[inline(always)]
fn word(bytes: &[u8], i: usize, word: &[u8]) -> Result<usize, usize> {
    if bytes[i..].starts_with(word) { Ok(i + word.len()) } else { Err(i) }
}

/// A short integer (at most 18 digits, no leading zero, no fraction or exponent: the numbers
/// the general scanner accepts without asking serde_json).
#[inline(always)]
fn integer(bytes: &[u8], start: usize) -> Result<usize, usize> {
    let mut i = start + usize::from(bytes[start] == b'-');
    let first = i;
    while bytes.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    let digits = i - first;
    // A fraction or an exponent after the digits is refused by the caller, which expects `,`
    // or a closing bracket after a value.
    if digits == 0 || digits > 18 || (digits > 1 && bytes[first] == b'0') { Err(start) } else { Ok(i) }
}
