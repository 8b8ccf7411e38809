//! Journal lines that detect their own damage.
//!
//! Every line of a session journal (`trace.jsonl`, `conversation.jsonl`, `frames.jsonl`,
//! `spend.jsonl`) is a JSON object whose last two keys are `"_n"`, the line's number in its
//! file (from 1), and `"_crc"`, the CRC-32 (hex) of the object as serialized up to and
//! including `_n`. The line stays JSON (`jq` reads it), and a torn, merged, flipped, dropped or
//! reordered line no longer verifies in its place.
//!
//! [`scan`] reads a whole file: complete lines that verify, numbered 1, 2, 3…, form the valid
//! prefix; bytes after the last `\n` are a **torn tail** (a write cut short by a crash: truncate
//! and report); a complete line that does not verify, or carries the wrong number, is
//! **damage**, reported with its 1-based line number. A file written before sealing existed
//! (no line has `_crc`) is read as plain JSON lines.

use std::fmt;

const KEY: &[u8] = b"\"_crc\":\"";
/// `"_crc":"` + 8 hex digits + `"}`.
const SEAL_LEN: usize = KEY.len() + 8 + 2;

fn crc(bytes: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(bytes);
    h.finalize()
}

/// Number (`_n`) and seal one serialized JSON object (`{…}`), ending it with `\n`.
pub fn seal_line(mut object: Vec<u8>, n: u64) -> Vec<u8> {
    if object.last() == Some(&b'}') {
        object.pop();
        if object.len() > 1 {
            object.push(b',');
        }
        object.extend_from_slice(b"\"_n\":");
        push_decimal(&mut object, n);
        object.push(b'}');
    }
    seal(object)
}

/// Append `n` in decimal. Every journal line gets a number and a seal, so they are written
/// digit by digit rather than through the formatting machinery.
fn push_decimal(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(decimal(n, &mut [0; 20]).as_bytes());
}

/// `n` in decimal, written into the end of `digits`: what `format!("{n}")` gives, without the
/// formatting machinery (journal lines and frame lines number every line).
pub(crate) fn decimal(mut n: u64, digits: &mut [u8; 20]) -> &str {
    let mut at = digits.len();
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // ASCII digits only.
    std::str::from_utf8(&digits[at..]).unwrap_or_default()
}

/// Append `v` as eight lower-case hex digits (`{v:08x}`).
fn push_hex8(out: &mut Vec<u8>, v: u32) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    for shift in (0..8).rev() {
        out.push(HEX[((v >> (shift * 4)) & 0xf) as usize]);
    }
}

/// The `_n` an unsealed object ends with.
fn number(object: &[u8]) -> Option<u64> {
    let body = object.strip_suffix(b"}")?;
    let at = body.windows(5).rposition(|w| w == b"\"_n\":")?;
    std::str::from_utf8(&body[at + 5..]).ok()?.parse().ok()
}

/// Seal one serialized JSON object (`{…}`) and end it with `\n`. Anything that is not an
/// object is wrapped unchanged (it will not verify, which is the safe side).
pub fn seal(mut object: Vec<u8>) -> Vec<u8> {
    let sum = crc(&object);
    if object.last() == Some(&b'}') {
        object.pop();
        if object.len() > 1 {
            object.push(b',');
        }
        object.extend_from_slice(KEY);
        push_hex8(&mut object, sum);
        object.extend_from_slice(b"\"}");
    }
    object.push(b'\n');
    object
}

/// The object a sealed line carries (without its seal), or `None` when the line (without its
/// `\n`) does not verify.
pub fn unseal(line: &[u8]) -> Option<Vec<u8>> {
    if line.len() < SEAL_LEN + 1 || !line.ends_with(b"\"}") {
        return None;
    }
    let seal_at = line.len() - SEAL_LEN;
    if &line[seal_at..seal_at + KEY.len()] != KEY {
        return None;
    }
    let hex = std::str::from_utf8(&line[seal_at + KEY.len()..line.len() - 2]).ok()?;
    let want = u32::from_str_radix(hex, 16).ok()?;
    let mut object = match line[seal_at - 1] {
        b',' => line[..seal_at - 1].to_vec(),
        b'{' => line[..seal_at].to_vec(),
        _ => return None,
    };
    object.push(b'}');
    (crc(&object) == want).then_some(object)
}

/// Whether a line carries a seal at all (verifying or not).
fn looks_sealed(line: &[u8]) -> bool {
    line.len() >= SEAL_LEN && line.ends_with(b"\"}") && line[line.len() - SEAL_LEN..].starts_with(KEY)
}

/// What reading a journal file found.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Scan {
    /// The verified objects of the valid prefix, in order.
    pub records: Vec<Vec<u8>>,
    /// Bytes of the valid prefix (where the file may be cut to keep exactly it).
    pub valid_bytes: usize,
    /// Bytes after the last `\n` (a torn write), if any.
    pub torn_bytes: usize,
    /// The first damaged complete line: its 1-based number.
    pub damaged_line: Option<usize>,
    /// Complete lines after the valid prefix (the damaged one and everything after it).
    pub lines_after_damage: usize,
    /// Whether the file predates sealing (read as plain JSON lines).
    pub legacy: bool,
}

impl Scan {
    /// Whether there is damage in a complete line (a torn tail alone is not damage).
    pub fn damaged(&self) -> bool {
        self.damaged_line.is_some()
    }
}

/// Read a journal file's bytes.
pub fn scan(bytes: &[u8]) -> Scan {
    let complete = bytes.iter().rposition(|b| *b == b'\n').map_or(0, |i| i + 1);
    let mut out = Scan { torn_bytes: bytes.len() - complete, ..Scan::default() };
    let lines: Vec<&[u8]> = bytes[..complete].split(|b| *b == b'\n').collect();
    let lines = &lines[..lines.len().saturating_sub(1)];
    out.legacy = !lines.is_empty() && !lines.iter().any(|l| looks_sealed(l));
    let mut offset = 0;
    for (i, line) in lines.iter().enumerate() {
        let record = if out.legacy {
            serde_json::from_slice::<serde_json::Value>(line).ok().map(|_| line.to_vec())
        } else {
            unseal(line).filter(|o| number(o) == Some(i as u64 + 1))
        };
        match record {
            Some(r) => {
                out.records.push(r);
                offset += line.len() + 1;
                out.valid_bytes = offset;
            }
            None => {
                out.damaged_line = Some(i + 1);
                out.lines_after_damage = lines.len() - i;
                break;
            }
        }
    }
    out
}

impl fmt::Display for Scan {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} good lines", self.records.len())?;
        if let Some(l) = self.damaged_line {
            write!(f, ", damage at line {l} ({} lines from there on)", self.lines_after_damage)?;
        }
        if self.torn_bytes > 0 {
            write!(f, ", a torn last line of {} bytes", self.torn_bytes)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_and_seals_are_written_as_format_writes_them() {
        for n in [0, 1, 9, 10, 99, 100, 12_345, u64::from(u32::MAX), u64::MAX - 1, u64::MAX] {
            let mut out = b"x".to_vec();
            push_decimal(&mut out, n);
            assert_eq!(out, format!("x{n}").into_bytes());
        }
        for v in [0, 1, 0xf, 0x10, 0xabcdef, 0x0123_4567, 0x89ab_cdef, u32::MAX] {
            let mut out = Vec::new();
            push_hex8(&mut out, v);
            assert_eq!(out, format!("{v:08x}").into_bytes());
        }
    }

    fn file(objects: &[&str]) -> Vec<u8> {
        objects.iter().enumerate().flat_map(|(i, o)| seal_line(o.as_bytes().to_vec(), i as u64 + 1)).collect()
    }

    #[test]
    fn a_sealed_line_is_json_and_verifies() {
        let line = seal(br#"{"a":1,"b":"x"}"#.to_vec());
        let v: serde_json::Value = serde_json::from_slice(&line).expect("still JSON");
        assert_eq!(v["a"], 1);
        assert_eq!(unseal(&line[..line.len() - 1]).expect("verifies"), br#"{"a":1,"b":"x"}"#);
        assert_eq!(unseal(&seal(b"{}".to_vec())[..]).map(|_| ()), None, "the newline is not part of the line");
        let empty = seal(b"{}".to_vec());
        assert_eq!(unseal(&empty[..empty.len() - 1]).expect("verifies"), b"{}");
    }

    #[test]
    fn a_flipped_byte_anywhere_is_detected() {
        let line = seal(br#"{"event_type":"task_start","text":"hello"}"#.to_vec());
        let body = &line[..line.len() - 1];
        for i in 0..body.len() {
            let mut bad = body.to_vec();
            bad[i] ^= 0x01;
            assert!(unseal(&bad).is_none(), "flip at {i} passed");
        }
    }

    #[test]
    fn a_torn_tail_is_reported_and_not_merged_with_the_next_record() {
        let mut bytes = file(&[r#"{"n":1}"#, r#"{"n":2}"#]);
        let third = seal_line(br#"{"n":3}"#.to_vec(), 3);
        bytes.extend_from_slice(&third[..5]);
        let s = scan(&bytes);
        assert_eq!((s.records.len(), s.torn_bytes, s.damaged_line), (2, 5, None));
        // The old failure: the next record appended right after the torn bytes. Now the merged
        // line does not verify: it is damage, never a silently lost record.
        bytes.extend_from_slice(&seal_line(br#"{"n":4}"#.to_vec(), 3));
        let s = scan(&bytes);
        assert_eq!((s.records.len(), s.damaged_line), (2, Some(3)));
    }

    #[test]
    fn damage_in_the_middle_names_its_line_and_keeps_the_prefix() {
        let mut bytes = file(&[r#"{"n":1}"#, r#"{"n":2}"#, r#"{"n":3}"#, r#"{"n":4}"#]);
        let second_line_start = seal_line(br#"{"n":1}"#.to_vec(), 1).len();
        bytes[second_line_start + 3] = 0xff; // invalid UTF-8 in line 2
        let s = scan(&bytes);
        assert_eq!((s.records.len(), s.damaged_line, s.lines_after_damage), (1, Some(2), 3));
        assert_eq!(s.valid_bytes, second_line_start);
    }

    #[test]
    fn reordered_or_dropped_lines_are_damage() {
        let lines: Vec<Vec<u8>> = (1..=4).map(|n| seal_line(format!("{{\"n\":{n}}}").into_bytes(), n)).collect();
        let swapped = [lines[0].clone(), lines[2].clone(), lines[1].clone(), lines[3].clone()].concat();
        assert_eq!(scan(&swapped).damaged_line, Some(2));
        let dropped = [lines[0].clone(), lines[2].clone(), lines[3].clone()].concat();
        assert_eq!(scan(&dropped).damaged_line, Some(2));
        assert_eq!(scan(&lines.concat()).records.len(), 4);
        assert_eq!(number(&unseal(&lines[3][..lines[3].len() - 1]).expect("ok")), Some(4));
    }

    #[test]
    fn a_file_from_before_sealing_is_read_as_json_lines() {
        let s = scan(b"{\"n\":1}\n{\"n\":2}\n");
        assert!(s.legacy);
        assert_eq!(s.records.len(), 2);
        let s = scan(b"{\"n\":1}\nnot json\n");
        assert_eq!(s.damaged_line, Some(2));
    }
}
