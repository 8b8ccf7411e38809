//! The message list in the runtime's compact form, written as the Messages API's list in the
//! same pass that reads it (a [`guest_http::neutral::Transcode`]).
//!
//! Why: the driver reads the whole history on every call. Read into the general types first
//! (a message and its blocks built, pushed, then written and dropped), each turn of history
//! cost about 9,000 guest instructions on every later call; that growth is most of what makes
//! a long session's turns slower than its first ones (BENCHMARKS.md, "Twelfth pass").
//!
//! What it writes: exactly the items [`super::translate`] writes for the same list read the
//! general way (the differential tests compare the bytes): tool messages merged into one user
//! message of `tool_result` blocks, the blocks each role can carry, empty texts and unsigned
//! thinking left out, a message left empty dropped.
//!
//! It gives up (and the list is read the general way) on anything it would have to decide
//! otherwise: a message whose first key is not `role` or that repeats `role` or `content`, an
//! unknown role, `content` that is not an array, a block that is not an object, a `type` with
//! an escape, an image, a tool call whose `input` is a string, any value that would be an
//! error (a text that is not a string, a tool message without its id), and anything the
//! [`Cursor`] does not read (whitespace, escaped keys, `\u` escapes).

use guest_http::compact_block::{self, Block, Fields};
use guest_http::cursor::Cursor;
use guest_http::wire::comma;

/// Where a message's blocks go.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    User,
    Assistant,
    /// Inside a `tool_result` block.
    Result,
}

/// The list at `c`, its items written into `out`; `None` when it gave up.
pub fn messages(c: &mut Cursor<'_>, out: &mut Vec<u8>) -> Option<()> {
    // The list, a message, its content and a block: four levels below the start.
    if !c.room_for(4) {
        return None;
    }
    let depth = c.depth();
    // Whether a user message of `tool_result` blocks is open, and a tool message's blocks.
    let mut results = false;
    let mut scratch = Vec::new();
    c.array(|c| message(c, out, &mut results, &mut scratch, depth))?;
    if results {
        out.extend_from_slice(b"]}");
    }
    Some(())
}

fn message(c: &mut Cursor<'_>, out: &mut Vec<u8>, results: &mut bool, scratch: &mut Vec<u8>, depth: u32) -> Option<()> {
    if !c.literal(br#"{"role":"#) {
        return None;
    }
    let place = if c.literal(br#""assistant""#) {
        Place::Assistant
    } else if c.literal(br#""user""#) {
        Place::User
    } else if c.literal(br#""tool""#) {
        return tool_message(c, out, results, scratch, depth);
    } else {
        return None;
    };
    if *results {
        out.extend_from_slice(b"]}");
        *results = false;
    }
    // Written, then taken back if no block survives.
    let mark = out.len();
    comma(out);
    out.extend_from_slice(if place == Place::Assistant {
        br#"{"role":"assistant","content":["#
    } else {
        br#"{"role":"user","content":["#
    });
    let start = out.len();
    let mut content = false;
    while c.next(b'}')? {
        match c.key()? {
            b"content" if !content => {
                content = true;
                blocks(c, out, place, depth)?;
            }
            b"content" | b"role" => return None,
            _ => drop(c.value(depth + 2)?),
        }
    }
    if out.len() == start {
        out.truncate(mark);
    } else {
        out.extend_from_slice(b"]}");
    }
    Some(())
}

/// A tool message (its `role` read): one `tool_result` block in the open user message.
fn tool_message(
    c: &mut Cursor<'_>,
    out: &mut Vec<u8>,
    results: &mut bool,
    scratch: &mut Vec<u8>,
    depth: u32,
) -> Option<()> {
    let at = c.position();
    let common = compact_block::tool_tail(c, depth);
    if common.is_none() {
        c.rewind(at);
    }
    let (id, is_error, content) = match common {
        // The text block as it came is the content, unless its text is empty.
        Some(t) => (t.id, t.is_error, if t.text == b"\"\"" { &[][..] } else { t.block }),
        None => any_tool_message(c, scratch, depth)?,
    };
    if !*results {
        comma(out);
        out.extend_from_slice(br#"{"role":"user","content":["#);
        *results = true;
    }
    comma(out);
    out.extend_from_slice(br#"{"type":"tool_result","tool_use_id":"#);
    out.extend_from_slice(id);
    out.extend_from_slice(if is_error { br#","is_error":true"# } else { br#","is_error":false"# });
    if !content.is_empty() {
        out.extend_from_slice(br#","content":["#);
        out.extend_from_slice(content);
        out.push(b']');
    }
    out.push(b'}');
    Some(())
}

/// A tool message's fields after its `role`, in any order: its id, its flag and its
/// `tool_result` content written into `scratch`.
fn any_tool_message<'a, 's>(
    c: &mut Cursor<'a>,
    scratch: &'s mut Vec<u8>,
    depth: u32,
) -> Option<(&'a [u8], bool, &'s [u8])> {
    scratch.clear();
    let (mut content, mut id, mut is_error) = (false, None, None);
    while c.next(b'}')? {
        match c.key()? {
            b"content" if !content => {
                content = true;
                blocks(c, scratch, Place::Result, depth)?;
            }
            b"content" | b"role" => return None,
            b"tool_call_id" => id = Some(c.value(depth + 2)?),
            b"is_error" => is_error = Some(c.value(depth + 2)?),
            _ => drop(c.value(depth + 2)?),
        }
    }
    let id = id.filter(|id| id.starts_with('"') && *id != "\"\"")?;
    Some((id.as_bytes(), is_error == Some("true"), &scratch[..]))
}

/// A tool call's start once it is a `tool_use` block.
const TOOL_USE: &[u8] = br#"{"type":"tool_use","id":"#;

/// A `content` array, each block written as `place` carries it.
fn blocks(c: &mut Cursor<'_>, out: &mut Vec<u8>, place: Place, depth: u32) -> Option<()> {
    // Inside the request, the list, the message, its content and the block.
    let depth = depth + 4;
    c.array(|c| match compact_block::read(c, depth)? {
        // A text block is its own output; `{"type":"text","text":""}` is left out.
        Block::Text { block, text } => {
            if text != b"\"\"" {
                comma(out);
                out.extend_from_slice(block);
            }
            Some(())
        }
        // A tool call differs from its `tool_use` block in its type only.
        Block::Call { rest, .. } => {
            if place == Place::Assistant {
                comma(out);
                out.extend_from_slice(TOOL_USE);
                out.extend_from_slice(rest);
            }
            Some(())
        }
        Block::Other(f) => block(out, &f, place),
    })
}

fn is_string(json: &str) -> bool {
    json.starts_with('"')
}

fn block(out: &mut Vec<u8>, f: &Fields, place: Place) -> Option<()> {
    // No type, or one that is not a string: a block of no known kind, left out.
    let Some(kind) = f.kind.filter(|k| is_string(k)) else { return Some(()) };
    if kind.contains('\\') {
        return None;
    }
    let assistant = place == Place::Assistant;
    match kind {
        "\"text\"" => {
            let text = f.text.filter(|t| is_string(t))?;
            if text != "\"\"" {
                comma(out);
                out.extend_from_slice(br#"{"type":"text","text":"#);
                out.extend_from_slice(text.as_bytes());
                out.push(b'}');
            }
        }
        "\"image\"" => return None,
        "\"tool_call\"" if assistant => {
            let id = f.id.filter(|id| is_string(id))?;
            let name = f.name.filter(|name| is_string(name))?;
            let input = match f.input {
                None | Some("null") => "{}",
                Some(input) if is_string(input) => return None,
                Some(input) => input,
            };
            comma(out);
            out.extend_from_slice(br#"{"type":"tool_use","id":"#);
            out.extend_from_slice(id.as_bytes());
            out.extend_from_slice(br#","name":"#);
            out.extend_from_slice(name.as_bytes());
            out.extend_from_slice(br#","input":"#);
            out.extend_from_slice(input.as_bytes());
            out.push(b'}');
        }
        "\"thinking\"" if assistant => {
            let Some(signature) = f.signature.filter(|s| is_string(s) && *s != "\"\"") else { return Some(()) };
            let text = f.text.filter(|t| is_string(t))?;
            comma(out);
            out.extend_from_slice(br#"{"type":"thinking","thinking":"#);
            out.extend_from_slice(text.as_bytes());
            out.extend_from_slice(br#","signature":"#);
            out.extend_from_slice(signature.as_bytes());
            out.push(b'}');
        }
        "\"redacted_thinking\"" if assistant => {
            let data = f.data.filter(|d| is_string(d))?;
            comma(out);
            out.extend_from_slice(br#"{"type":"redacted_thinking","data":"#);
            out.extend_from_slice(data.as_bytes());
            out.push(b'}');
        }
        // A kind this place does not carry, or an unknown one: left out.
        _ => {}
    }
    Some(())
}

#[cfg(test)]
#[path = "fast_tests.rs"]
mod tests;
