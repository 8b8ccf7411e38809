//! The message list in the runtime's compact form, written as Chat Completions messages in the
//! same pass that reads it (a [`guest_http::neutral::Transcode`]).
//!
//! Why: the driver reads the whole history on every call; read into the general types first,
//! each turn of history costs several thousand guest instructions on every later call
//! (BENCHMARKS.md, "Twelfth pass").
//!
//! What it writes: exactly the items [`super::translate`] writes for the same list read the
//! general way (the differential tests compare the bytes). A message's blocks are noted as
//! slices of the input (texts and tool calls; other kinds are not sent), then written the way
//! its role wants them.
//!
//! It gives up (and the list is read the general way) on anything it would have to decide
//! otherwise: a message whose first key is not `role` or that repeats `role` or `content`, an
//! unknown role, `content` that is not an array, a block that is not an object, a `type` with
//! an escape, an image, a tool call whose `input` is a string or whose `id` or `name` is not
//! one, a text that is not a string, a tool message without its id, and anything the
//! [`Cursor`] does not read (whitespace, escaped keys, `\u` escapes).

use std::convert::Infallible;

use guest_http::compact_block::{self, Block, Fields};
use guest_http::cursor::Cursor;
use guest_http::wire::{comma, string};

/// What a message's blocks hold that Chat Completions is sent.
enum Part<'a> {
    /// A text's string literal.
    Text(&'a [u8]),
    /// A tool call: its id and name (string literals) and its input (`None` for none).
    Call { id: &'a [u8], name: &'a [u8], input: Option<&'a str> },
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
    Tool,
}

/// The list at `c`, its items written into `out`; `None` when it gave up.
pub fn messages(c: &mut Cursor<'_>, out: &mut Vec<u8>) -> Option<()> {
    // The list, a message, its content and a block: four levels below the start.
    if !c.room_for(4) {
        return None;
    }
    let depth = c.depth();
    let mut parts = Vec::new();
    c.array(|c| message(c, out, &mut parts, depth))
}

fn message<'a>(c: &mut Cursor<'a>, out: &mut Vec<u8>, parts: &mut Vec<Part<'a>>, depth: u32) -> Option<()> {
    if !c.literal(br#"{"role":"#) {
        return None;
    }
    let role = if c.literal(br#""assistant""#) {
        Role::Assistant
    } else if c.literal(br#""tool""#) {
        let at = c.position();
        if let Some(t) = compact_block::tool_tail(c, depth) {
            tool(out, &[Part::Text(t.text)], t.id, t.is_error);
            return Some(());
        }
        c.rewind(at);
        Role::Tool
    } else if c.literal(br#""user""#) {
        Role::User
    } else {
        return None;
    };
    parts.clear();
    let (mut content, mut id, mut is_error) = (false, None, None);
    while c.next(b'}')? {
        match c.key()? {
            b"content" if !content => {
                content = true;
                blocks(c, parts, depth)?;
            }
            b"content" | b"role" => return None,
            b"tool_call_id" => id = Some(c.value(depth + 2)?),
            b"is_error" => is_error = Some(c.value(depth + 2)?),
            _ => drop(c.value(depth + 2)?),
        }
    }
    match role {
        Role::User => user(out, parts),
        Role::Assistant => assistant(out, parts),
        Role::Tool => {
            let id = id.filter(|id| id.starts_with('"') && *id != "\"\"")?;
            tool(out, parts, id.as_bytes(), is_error == Some("true"));
        }
    }
    Some(())
}

/// A `content` array's texts and tool calls, noted in `parts`.
fn blocks<'a>(c: &mut Cursor<'a>, parts: &mut Vec<Part<'a>>, depth: u32) -> Option<()> {
    // Inside the request, the list, the message, its content and the block.
    let depth = depth + 4;
    c.array(|c| {
        match compact_block::read(c, depth)? {
            Block::Text { text, .. } => parts.push(Part::Text(text)),
            Block::Call { id, name, input, .. } => parts.push(Part::Call { id, name, input: Some(input) }),
            Block::Other(f) => other(parts, &f)?,
        }
        Some(())
    })
}

fn is_string(json: &str) -> bool {
    json.starts_with('"')
}

/// A block read key by key.
fn other<'a>(parts: &mut Vec<Part<'a>>, f: &Fields<'a>) -> Option<()> {
    // No type, or one that is not a string: a block of no known kind, not sent.
    let Some(kind) = f.kind.filter(|k| is_string(k)) else { return Some(()) };
    match kind {
        "\"text\"" => parts.push(Part::Text(f.text.filter(|t| is_string(t))?.as_bytes())),
        "\"tool_call\"" => {
            let id = f.id.filter(|id| is_string(id))?;
            let name = f.name.filter(|name| is_string(name))?;
            let input = match f.input {
                None | Some("null") => None,
                Some(input) if is_string(input) => return None,
                Some(input) => Some(input),
            };
            parts.push(Part::Call { id: id.as_bytes(), name: name.as_bytes(), input });
        }
        "\"image\"" => return None,
        kind if kind.contains('\\') => return None,
        // Thinking and unknown kinds: not sent.
        _ => {}
    }
    Some(())
}

/// The non-empty texts' contents joined with `\n` (still escaped, without their quotes);
/// the first one written, if any.
fn texts<'a>(out: &mut Vec<u8>, parts: &[Part<'a>]) -> Option<&'a [u8]> {
    let mut first = None;
    for part in parts {
        let Part::Text(text) = part else { continue };
        let inside = text.get(1..text.len() - 1).unwrap_or_default();
        if inside.is_empty() {
            continue;
        }
        if first.is_some() {
            out.extend_from_slice(b"\\n");
        }
        out.extend_from_slice(inside);
        first.get_or_insert(inside);
    }
    first
}

fn user(out: &mut Vec<u8>, parts: &[Part]) {
    let mark = out.len();
    comma(out);
    out.extend_from_slice(br#"{"role":"user","content":""#);
    if texts(out, parts).is_none() {
        out.truncate(mark);
    } else {
        out.extend_from_slice(b"\"}");
    }
}

fn assistant(out: &mut Vec<u8>, parts: &[Part]) {
    let Ok(head) = super::begin_assistant(out, |out| Ok::<_, Infallible>(texts(out, parts).is_some()));
    for part in parts {
        let Part::Call { id, name, input } = part else { continue };
        comma(out);
        out.extend_from_slice(br#"{"id":"#);
        out.extend_from_slice(id);
        out.extend_from_slice(br#","type":"function","function":{"name":"#);
        out.extend_from_slice(name);
        out.extend_from_slice(br#","arguments":"#);
        match input {
            // An object or other JSON value, sent as its text in a string.
            Some(input) => string(out, input),
            None => out.extend_from_slice(br#""{}""#),
        }
        out.extend_from_slice(b"}}");
    }
    super::end_assistant(out, head);
}

fn tool(out: &mut Vec<u8>, parts: &[Part], id: &[u8], is_error: bool) {
    comma(out);
    out.extend_from_slice(br#"{"role":"tool","tool_call_id":"#);
    out.extend_from_slice(id);
    out.extend_from_slice(br#","content":""#);
    let start = out.len();
    let first = texts(out, parts);
    if is_error {
        // Only the short escapes reach here, and `error: ` has no character they stand for:
        // the text as written starts with it exactly when the decoded text does.
        match first {
            None => out.extend_from_slice(b"error"),
            Some(text) if text.starts_with(b"error: ") => {}
            Some(_) => drop(out.splice(start..start, b"error: ".iter().copied())),
        }
    }
    out.extend_from_slice(b"\"}");
}

#[cfg(test)]
#[path = "fast_tests.rs"]
mod tests;
