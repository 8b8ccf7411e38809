//! One content block of the runtime's compact message list, read through a [`Cursor`] for
//! the drivers' one-pass writers of the list ([`crate::neutral::Transcode`]).
//!
//! The two blocks the runtime writes most, a text and a tool call with an object `input`, are
//! recognized by their exact text (`{"type":"text","text":…}`,
//! `{"type":"tool_call","id":…,"name":…,"input":{…}}`) and handed back as slices of it, so a
//! driver can copy most of a block in one piece. Any other block is read key by key into
//! [`Fields`].
//!
//! [`tool_tail`] reads the rest of a tool message in the same way, when it is written exactly as
//! the runtime writes it.
//!
//! Guarantees: every byte passed is checked as the [`Cursor`] checks it; the slices handed back
//! are whole JSON values (or, for the `rest` of a [`Block::Call`], the block's text from its
//! `id` value to its end); `None` means the cursor met something it does not read, or an
//! image's `source`, which the general reader handles.

use crate::cursor::Cursor;

/// A block as the runtime writes it most, or any block's fields.
pub enum Block<'a> {
    /// `{"type":"text","text":T}`: the whole block and `T` (a string literal).
    Text { block: &'a [u8], text: &'a [u8] },
    /// `{"type":"tool_call","id":I,"name":N,"input":{…}}`: its text from `I` to the block's
    /// end, and `I`, `N` and the input (an object).
    Call { rest: &'a [u8], id: &'a [u8], name: &'a [u8], input: &'a str },
    /// Any other block: the fields the drivers know, as JSON texts.
    Other(Fields<'a>),
}

/// A block's known fields (the last of duplicate keys wins).
#[derive(Default)]
pub struct Fields<'a> {
    pub kind: Option<&'a str>,
    pub text: Option<&'a str>,
    pub id: Option<&'a str>,
    pub name: Option<&'a str>,
    pub input: Option<&'a str>,
    pub signature: Option<&'a str>,
    pub data: Option<&'a str>,
}

/// The starts of a text block and of a tool call as the runtime writes them.
const TEXT: &[u8] = br#"{"type":"text","text":"#;
const TOOL_CALL: &[u8] = br#"{"type":"tool_call","id":"#;

/// The block at `c`, its values inside `depth` open containers.
#[inline(always)]
pub fn read<'a>(c: &mut Cursor<'a>, depth: u32) -> Option<Block<'a>> {
    let start = c.position();
    if let Some(block) = common(c, start, depth) {
        return Some(block);
    }
    c.rewind(start);
    fields(c, depth).map(Block::Other)
}

/// The block at `c` read key by key (the last of duplicate keys wins, unknown keys passed),
/// its values inside `depth` open containers; `None` at an image's `source` (the general
/// reader's) or anything the cursor does not read.
pub fn fields<'a>(c: &mut Cursor<'a>, depth: u32) -> Option<Fields<'a>> {
    let mut f = Fields::default();
    c.object(|c, key| {
        let slot = match key {
            b"type" => &mut f.kind,
            b"text" => &mut f.text,
            b"id" => &mut f.id,
            b"name" => &mut f.name,
            b"input" => &mut f.input,
            b"signature" => &mut f.signature,
            b"data" => &mut f.data,
            b"source" => return None,
            _ => return c.value(depth).map(drop),
        };
        *slot = Some(c.value(depth)?);
        Some(())
    })?;
    Some(f)
}

/// The block at `start` when it is written exactly as the runtime writes a text or a tool
/// call; `None` otherwise (the cursor is then anywhere inside it).
#[inline(always)]
fn common<'a>(c: &mut Cursor<'a>, start: usize, depth: u32) -> Option<Block<'a>> {
    if c.literal(TEXT) {
        let text = c.position();
        c.pass_string()?;
        let text = c.since(text);
        c.eat(b'}')?;
        return Some(Block::Text { block: c.since(start), text });
    }
    if !c.literal(TOOL_CALL) {
        return None;
    }
    let rest = c.position();
    c.pass_string()?;
    let id = c.since(rest);
    if !c.literal(br#","name":"#) {
        return None;
    }
    let name = c.position();
    c.pass_string()?;
    let name = c.since(name);
    if !c.literal(br#","input":"#) || c.byte()? != b'{' {
        return None;
    }
    let input = c.other(depth)?;
    c.eat(b'}')?;
    Some(Block::Call { rest: c.since(rest), id, name, input })
}

/// A tool message's fields after its `role`, exactly as the runtime writes them:
/// `,"content":[{"type":"text","text":…}],"tool_call_id":…,"is_error":…}`.
pub struct ToolTail<'a> {
    /// The tool call's id (a string literal, not empty).
    pub id: &'a [u8],
    pub is_error: bool,
    /// The text block, whole, and its text (a string literal).
    pub block: &'a [u8],
    pub text: &'a [u8],
}

/// The rest of a tool message (its `role` read) when it is in the runtime's exact form, its
/// values inside `depth` open containers around the list; `None` otherwise (the cursor is then
/// anywhere inside it).
pub fn tool_tail<'a>(c: &mut Cursor<'a>, depth: u32) -> Option<ToolTail<'a>> {
    if !c.literal(br#","content":["#) {
        return None;
    }
    // Inside the request, the list, the message, its content and the block.
    let Block::Text { block, text } = read(c, depth + 4)? else { return None };
    if !c.literal(br#"],"tool_call_id":"#) {
        return None;
    }
    let id = c.position();
    c.pass_string()?;
    let id = c.since(id);
    if !c.literal(br#","is_error":"#) || id == b"\"\"" {
        return None;
    }
    let is_error = if c.literal(b"true") {
        true
    } else if c.literal(b"false") {
        false
    } else {
        return None;
    };
    c.eat(b'}')?;
    Some(ToolTail { id, is_error, block, text })
}
