//! The message list as the runtime writes it, read in one tight loop.
//!
//! Why: a driver reads the whole history on every call, so the list is most of what it reads
//! by a long session. The general reader ([`super::Read`] over `List<Obj<Message>>`) goes
//! through a closure, a decoded key and a `Result` per value; compiled to wasm that costs
//! several hundred instructions per value. This loop keeps its position in a local and
//! matches keys as bytes.
//!
//! What it reads: the compact JSON the runtime serializes: no whitespace, each message an
//! object with unescaped keys, `content` an array of block objects, strings whose escapes are
//! the short ones (`\n`, `\"`, …). Values it does not look into (numbers, `true`, a tool
//! call's `input`, unknown keys' values) are passed by the general scanner at the depth they
//! sit at. On anything else (whitespace, an escaped key, a `\u` escape, `content` that is a
//! string or `null`, an image's `source`, a message or block that is not an object, text that
//! is not JSON) it gives up, and the general reader reads the list from its start.
//!
//! Guarantee: when it gives a list, that list and the position after it are what the general
//! reader gives for the same text, and every byte it passed is valid JSON by the
//! [`crate::scan`] rules (`fast_tests` compares both readers over the test corpus and over
//! every cut and one-byte change of generated histories).

use super::{Block, Content, Message, Obj, Raw, Shape};
use crate::scan::{MAX_DEPTH, Scan, compact, plain_run};

/// The list at `scan`'s position (after whitespace), or `None` with `scan` untouched.
pub(super) fn messages<'a>(scan: &mut Scan<'a>) -> Option<Vec<Obj<Message<'a>>>> {
    let depth = scan.depth();
    // The list, a message, its content and a block: four levels below `depth`.
    if depth + 4 > MAX_DEPTH {
        return None;
    }
    let mut r = Reader { text: scan.text(), at: scan.position(), depth };
    let list = r.list()?;
    scan.skip_to(r.at);
    Some(list)
}

struct Reader<'a> {
    text: &'a str,
    at: usize,
    /// Containers open around the list.
    depth: u32,
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn byte(&self) -> Option<u8> {
        self.text.as_bytes().get(self.at).copied()
    }

    #[inline(always)]
    fn eat(&mut self, byte: u8) -> Option<()> {
        (self.byte()? == byte).then(|| self.at += 1)
    }

    /// After an item: `true` at `,` (another follows), `false` at `close`.
    #[inline(always)]
    fn next(&mut self, close: u8) -> Option<bool> {
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
    fn empty(&mut self, close: u8) -> Option<bool> {
        let empty = self.byte()? == close;
        if empty {
            self.at += 1;
        }
        Some(empty)
    }

    /// A key without escapes and its `:`; the key's bytes.
    #[inline(always)]
    fn key(&mut self) -> Option<&'a [u8]> {
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

    /// A value: a string checked here, anything else by the general scanner inside `depth`
    /// containers.
    #[inline(always)]
    fn value(&mut self, depth: u32) -> Option<Raw<'a>> {
        if self.byte()? == b'"' { self.string() } else { self.other(depth) }
    }

    /// A string whose escapes are the short ones (a `\u` needs serde_json's check).
    fn string(&mut self) -> Option<Raw<'a>> {
        let start = self.at;
        let end = compact::string(self.text.as_bytes(), start).ok()?;
        self.at = end;
        Some(Raw::checked(self.text.get(start..end)?))
    }

    #[cold]
    fn other(&mut self, depth: u32) -> Option<Raw<'a>> {
        let mut scan = Scan::resume(self.text, self.at, depth);
        let raw = scan.raw().ok()?;
        self.at = scan.position();
        Some(Raw::checked(raw))
    }

    /// `[`, then `item` for each element, then `]`.
    #[inline(always)]
    fn array(&mut self, mut item: impl FnMut(&mut Self) -> Option<()>) -> Option<()> {
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

    fn list(&mut self) -> Option<Vec<Obj<Message<'a>>>> {
        let mut list = Vec::new();
        self.array(|r| r.message().map(|m| list.push(m)))?;
        Some(list)
    }

    /// `{`, then for each member its key, whose value `each` reads, then `}`.
    #[inline(always)]
    fn object(&mut self, mut each: impl FnMut(&mut Self, &'a [u8]) -> Option<()>) -> Option<()> {
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

    fn message(&mut self) -> Option<Obj<Message<'a>>> {
        // Inside the request, the list and this message.
        let depth = self.depth + 2;
        let mut m = Message::default();
        self.object(|r, key| {
            match key {
                b"role" => m.role = Some(r.value(depth)?),
                b"content" => m.content = r.content()?,
                b"tool_call_id" => m.tool_call_id = Some(r.value(depth)?),
                b"is_error" => m.is_error = Some(r.value(depth)?),
                _ => drop(r.value(depth)?),
            }
            Some(())
        })?;
        Some(Obj { shape: Shape::Object, fields: m })
    }

    fn content(&mut self) -> Option<Content<'a>> {
        let mut content = Content::Many(Vec::new());
        self.array(|r| r.block().map(|b| content.push(b)))?;
        Some(content)
    }

    fn block(&mut self) -> Option<Obj<Block<'a>>> {
        // Inside the request, the list, the message, its content and this block.
        let depth = self.depth + 4;
        let mut b = Block::default();
        self.object(|r, key| {
            let slot = match key {
                b"type" => &mut b.kind,
                b"text" => &mut b.text,
                b"id" => &mut b.id,
                b"name" => &mut b.name,
                b"input" => &mut b.input,
                b"signature" => &mut b.signature,
                b"data" => &mut b.data,
                // An image's source is read by the general reader.
                b"source" => return None,
                _ => return r.value(depth).map(drop),
            };
            *slot = Some(r.value(depth)?);
            Some(())
        })?;
        Some(Obj { shape: Shape::Object, fields: b })
    }
}

#[cfg(test)]
#[path = "neutral_fast_tests.rs"]
mod fast_tests;
