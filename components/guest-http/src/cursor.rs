//! A cursor over the compact JSON the runtime writes, for readers that keep their position in
//! a local and match keys as bytes: the fast list reader of [`crate::neutral`] and the drivers'
//! one-pass writers of the message list ([`crate::neutral::Transcode`]).
//!
//! Why: the general reader ([`crate::scan::Scan`] under [`crate::lenient`]) goes through a
//! closure, a decoded key and a `Result` per value; compiled to wasm that costs several hundred
//! instructions per value, and a driver reads the whole history on every call.
//!
//! What it reads: no whitespace, unescaped keys, strings whose escapes are the short ones
//! (`\n`, `\"`, …). Other values (numbers, `true`, objects, arrays) are passed by the compact
//! container loop or, failing that, by the general scanner, at the depth they sit at. Every
//! method answers `None` on anything else, and the caller gives up and leaves the text to the
//! general reader.
//!
//! Guarantee: every byte a cursor passes is valid JSON by the [`crate::scan`] rules, judged at
//! the nesting the caller gives; a string it hands back is a whole literal, quotes included.

use crate::scan::{MAX_DEPTH, Scan, compact, plain_run};

/// A position in a text and the containers open around the place the cursor started.
pub struct Cursor<'a> {
    text: &'a str,
    at: usize,
    depth: u32,
}

impl<'a> Cursor<'a> {
    /// A cursor at byte `at` of `text`, inside `depth` open containers.
    pub(crate) fn new(text: &'a str, at: usize, depth: u32) -> Self {
        Cursor { text, at, depth }
    }

    /// Where the cursor is (a byte offset).
    pub fn position(&self) -> usize {
        self.at
    }

    /// Containers open around the place the cursor started.
    pub fn depth(&self) -> u32 {
        self.depth
    }

    /// Whether `levels` more containers than the start's fit in serde_json's limit.
    pub fn room_for(&self, levels: u32) -> bool {
        self.depth + levels <= MAX_DEPTH
    }

    #[inline(always)]
    pub fn byte(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    /// Pass `byte`, if it is next.
    #[inline(always)]
    pub fn eat(&mut self, byte: u8) -> Option<()> {
        (self.byte()? == byte).then(|| self.at += 1)
    }

    /// After an item: `true` at `,` (another follows), `false` at `close`.
    #[inline(always)]
    pub fn next(&mut self, close: u8) -> Option<bool> {
        let b = self.byte()?;
        self.at += 1;
        match b {
            b',' => Some(true),
            b if b == close => Some(false),
            _ => None,
        }
    }

    /// An empty container's `close`, if it is next.
    #[inline(always)]
    pub fn empty(&mut self, close: u8) -> Option<bool> {
        let empty = self.byte()? == close;
        if empty {
            self.at += 1;
        }
        Some(empty)
    }

    /// Pass `lit` if the text goes on with it.
    #[inline(always)]
    pub fn literal(&mut self, lit: &[u8]) -> bool {
        let next = self.text.as_bytes().get(self.at..self.at + lit.len());
        let same = next.is_some_and(|next| same(next, lit));
        if same {
            self.at += lit.len();
        }
        same
    }

    /// Go back to `to`, a position this cursor has been at (a later one is ignored). What it
    /// passes again is checked again.
    pub fn rewind(&mut self, to: usize) {
        self.at = self.at.min(to);
    }

    /// The text from `from` (a position this cursor has been at) to the cursor.
    #[inline(always)]
    pub fn since(&self, from: usize) -> &'a [u8] {
        self.text.as_bytes().get(from..self.at).unwrap_or_default()
    }

    /// Pass a string whose escapes are the short ones ([`Cursor::string`] without handing it
    /// back).
    #[inline(always)]
    pub fn pass_string(&mut self) -> Option<()> {
        if self.byte()? != b'"' {
            return None;
        }
        self.at = compact::string(self.text.as_bytes(), self.at).ok()?;
        Some(())
    }

    /// [`Cursor::key`] as text.
    #[inline(always)]
    pub fn key_str(&mut self) -> Option<&'a str> {
        let start = self.at + 1;
        let key = self.key()?;
        self.text.get(start..start + key.len())
    }

    /// A key without escapes and its `:`; the key's bytes.
    #[inline(always)]
    pub fn key(&mut self) -> Option<&'a [u8]> {
        let bytes = self.text.as_bytes();
        self.eat(b'"')?;
        let start = self.at;
        let end = plain_run(bytes, start);
        if bytes.get(end) != Some(&b'"') || bytes.get(end + 1) != Some(&b':') {
            return None;
        }
        self.at = end + 2;
        Some(&bytes[start..end])
    }

    /// A value inside `depth` open containers (counted from the text's start): a string
    /// checked here, anything else by [`Cursor::other`]. Its text.
    #[inline(always)]
    pub fn value(&mut self, depth: u32) -> Option<&'a str> {
        if self.byte()? == b'"' { self.string() } else { self.other(depth) }
    }

    /// A string whose escapes are the short ones (a `\u` needs serde_json's check); the
    /// literal, quotes included.
    #[inline(always)]
    pub fn string(&mut self) -> Option<&'a str> {
        let start = self.at;
        if self.byte()? != b'"' {
            return None;
        }
        let end = compact::string(self.text.as_bytes(), start).ok()?;
        self.at = end;
        self.text.get(start..end)
    }

    /// A value that is not a string: `true`, `false` and `null` here, a container by the
    /// compact loop, anything else (or a container that loop gives up on) by the general
    /// scanner.
    pub fn other(&mut self, depth: u32) -> Option<&'a str> {
        let start = self.at;
        let bytes = &self.text.as_bytes()[start..];
        let word: &[u8] = match bytes.first()? {
            b't' => b"true",
            b'f' => b"false",
            b'n' => b"null",
            b'{' | b'[' => {
                if let Ok(end) = compact::skip(self.text.as_bytes(), start, depth) {
                    self.at = end;
                    return self.text.get(start..end);
                }
                b""
            }
            _ => b"",
        };
        if !word.is_empty() {
            // A bare word is whole when a delimiter follows it; the caller checks which.
            if bytes.starts_with(word) {
                self.at += word.len();
                return self.text.get(start..self.at);
            }
            return None;
        }
        let mut scan = Scan::resume(self.text, start, depth);
        let raw = scan.raw().ok()?;
        self.at = scan.position();
        Some(raw)
    }

    /// `[`, then `item` for each element, then `]`.
    #[inline(always)]
    pub fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
        self.eat(b'[')?;
        if self.empty(b']')? {
            return Some(());
        }
        loop {
            item(self)?;
            if !self.next(b']')? {
                return Some(());
            }
        }
    }

    /// `{`, then for each member its key, whose value `each` reads, then `}`.
    #[inline(always)]
    pub fn object(&mut self, mut each: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
        self.eat(b'{')?;
        if self.empty(b'}')? {
            return Some(());
        }
        loop {
            let key = self.key()?;
            each(self, key)?;
            if !self.next(b'}')? {
                return Some(());
            }
        }
    }
}

/// `a == b` for slices of one length, eight bytes at a time (a slice compare would call
/// `memcmp`, a loop of one byte at a time in wasm).
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let word = |s: &[u8], i: usize| s.get(i..i + 8).map(|w| u64::from_le_bytes(w.try_into().unwrap_or_default()));
    let mut i = 0;
    while i + 8 <= b.len() {
        if word(a, i) != word(b, i) {
            return false;
        }
        i += 8;
    }
    // The last bytes as one more word, ending where the slices end, when they are that long.
    if b.len() >= 8 {
        return word(a, b.len() - 8) == word(b, b.len() - 8);
    }
    a.iter().zip(b).all(|(x, y)| x == y)
}
