//! The message list as the runtime writes it, read in one tight loop.
//!
//! Why: a driver reads the whole history on every call, so the list is most of what it reads
//! by a long session. The general reader ([`super::Read`] over `List<Obj<Message>>`) goes
//! through a closure, a decoded key and a `Result` per value; compiled to wasm that costs
//! several hundred instructions per value. This loop reads through a [`Cursor`], which keeps
//! its position in a local and matches keys as bytes.
//!
//! What it reads: the compact JSON the runtime serializes: no whitespace, each message an
//! object with unescaped keys, `content` an array of block objects, strings whose escapes are
//! the short ones (`\n`, `\"`, …). Values it does not look into (numbers, `true`, a tool
//! call's `input`, unknown keys' values) are passed by the cursor at the depth they sit
//! at. On anything else (whitespace, an escaped key, a `\u` escape, `content` that is a
//! string or `null`, an image's `source`, a message or block that is not an object, text that
//! is not JSON) it gives up, and the general reader reads the list from its start.
//!
//! Guarantee: when it gives a list, that list and the position after it are what the general
//! reader gives for the same text, and every byte it passed is valid JSON by the
//! [`crate::scan`] rules (`fast_tests` compares both readers over the test corpus and over
//! every cut and one-byte change of generated histories).

use super::{Block, Content, Message, Obj, Raw, Shape};
use crate::compact_block;
use crate::cursor::Cursor;
use crate::scan::Scan;

/// The list at `scan`'s position (after whitespace), or `None` with `scan` untouched.
pub(super) fn messages<'a>(scan: &mut Scan<'a>) -> Option<Vec<Obj<Message<'a>>>> {
    let mut c = Cursor::new(scan.text(), scan.position(), scan.depth());
    // The list, a message, its content and a block: four levels below the start.
    if !c.room_for(4) {
        return None;
    }
    let mut list = Vec::new();
    c.array(|c| message(c).map(|m| list.push(m)))?;
    scan.skip_to(c.position());
    Some(list)
}

fn message<'a>(c: &mut Cursor<'a>) -> Option<Obj<Message<'a>>> {
    // Inside the request, the list and this message.
    let depth = c.depth() + 2;
    let mut m = Message::default();
    c.object(|c, key| {
        match key {
            b"role" => m.role = Some(Raw::checked(c.value(depth)?)),
            b"content" => m.content = content(c)?,
            b"tool_call_id" => m.tool_call_id = Some(Raw::checked(c.value(depth)?)),
            b"is_error" => m.is_error = Some(Raw::checked(c.value(depth)?)),
            _ => drop(c.value(depth)?),
        }
        Some(())
    })?;
    Some(Obj { shape: Shape::Object, fields: m })
}

fn content<'a>(c: &mut Cursor<'a>) -> Option<Content<'a>> {
    let mut content = Content::Many(Vec::new());
    c.array(|c| block(c).map(|b| content.push(b)))?;
    Some(content)
}

fn block<'a>(c: &mut Cursor<'a>) -> Option<Obj<Block<'a>>> {
    // Inside the request, the list, the message, its content and this block.
    let f = compact_block::fields(c, c.depth() + 4)?;
    let raw = |v: Option<&'a str>| v.map(Raw::checked);
    let b = Block {
        kind: raw(f.kind),
        text: raw(f.text),
        id: raw(f.id),
        name: raw(f.name),
        input: raw(f.input),
        signature: raw(f.signature),
        data: raw(f.data),
        source: None,
    };
    Some(Obj { shape: Shape::Object, fields: b })
}

#[cfg(test)]
#[path = "neutral_fast_tests.rs"]
mod fast_tests;
