//! The neutral inference request (CONTRACT §3) as the drivers read it:
//! borrowed from `tool-input.data`, read in one pass, with the checks both
//! drivers make and their error messages.
//!
//! [`Input::parse`] reads the whole document into [`Request`] →
//! [`Message`] → [`Block`] and [`Tool`]. Every value a driver copies to its
//! provider (texts, ids, tool inputs, schemas, `params` values) is kept as
//! a [`Raw`]: its JSON text, borrowed, copied later without being decoded
//! or re-encoded. Values the drivers only inspect (`role`, `type`, keys) are
//! decoded, borrowed when they hold no escape. The only allocations are
//! the lists of messages, tools and `params` entries, the blocks of a
//! message that holds more than one (one block is kept inline), an image's
//! `source`, and the decoding of an inspected string or key that holds an
//! escape.
//!
//! [`Input::parse_with`] first hands the message list to a driver's
//! [`Transcode`], which writes the provider's list while it reads it; when
//! it gives up, the list is read as above. [`Request::messages`] then gives
//! the written list ([`Messages::Written`]) or the read one.
//!
//! Guarantees, the same as when the request was read as a
//! `serde_json::Value` (see [`crate::lenient`]): the same documents are
//! refused as invalid JSON, with the same message; any JSON that is valid
//! is read, whatever the types of its fields: a wrong type only becomes an
//! error when a driver asks for that field through the accessors below,
//! which return the old messages (`` `model` must be a non-empty string ``,
//! `messages[3].role must be a string`, …); unknown keys are skipped (after
//! the same checks); of duplicate keys the last wins; a block that is not
//! an object, or has no known `type`, reads as [`Kind::Other`].
//!
//! Deliberately not done: anything provider-specific (each driver's
//! `request` module decides what is sent and how), `continuation_id`,
//! `prompt_cache_key` and `produced_by` (no driver sends them; they are
//! checked and skipped like any unknown key).

use std::borrow::Cow;
use std::fmt;

use crate::cursor::Cursor;
use crate::lenient::{Fields, List, Read, raw, skip};
pub use crate::lenient::{Obj, Raw, Shape};
use crate::scan::{Refused, Scan};

/// A parsed `tool-input.data`: any JSON value, a [`Request`] when it is an
/// object.
#[derive(Debug)]
pub struct Input<'a> {
    request: Obj<Request<'a>>,
    size: usize,
}

/// A driver's writer of the message list straight from the runtime's compact form: reads the
/// list at the cursor and writes the provider's list items (comma-separated, without the
/// brackets) into the empty buffer, or answers `None` (what it wrote is then discarded and the
/// list is read the general way). It must answer only for a list it read whole and without
/// error, and write exactly the items the driver's translation of the list read the general
/// way would write.
pub type Transcode = for<'a> fn(&mut Cursor<'a>, &mut Vec<u8>) -> Option<()>;

impl<'a> Input<'a> {
    /// Read the document. The error is serde_json's for the first thing in
    /// it that is not valid JSON, exactly as `Value` would report it.
    pub fn parse(data: &'a str) -> Result<Self, serde_json::Error> {
        Self::read(data, None)
    }

    /// [`Input::parse`], with `transcode` tried on the message list first; when it answers,
    /// [`Request::messages`] gives what it wrote.
    pub fn parse_with(data: &'a str, transcode: Transcode) -> Result<Self, serde_json::Error> {
        Self::read(data, Some(transcode))
    }

    fn read(data: &'a str, transcode: Option<Transcode>) -> Result<Self, serde_json::Error> {
        let fields = Request { transcode, ..Request::default() };
        let request = crate::scan::whole(data, |scan| Obj::read_into(scan, fields))?;
        Ok(Input { request, size: data.len() })
    }

    /// The request, if the document is an object.
    pub fn request(&self) -> Result<&Request<'a>, String> {
        match self.request.shape {
            Shape::Object => Ok(&self.request.fields),
            _ => Err("the request must be a JSON object".into()),
        }
    }

    /// The input's size in bytes (a provider body is about as large).
    pub fn size(&self) -> usize {
        self.size
    }
}

/// The top-level fields of the request.
#[derive(Debug, Default)]
pub struct Request<'a> {
    model: Option<Raw<'a>>,
    max_tokens: Option<Raw<'a>>,
    system: Option<Raw<'a>>,
    params: Option<Obj<Params<'a>>>,
    messages: Option<List<Obj<Message<'a>>>>,
    /// The list as the driver's [`Transcode`] wrote it, when it answered.
    written: Option<Vec<u8>>,
    tools: Option<List<Obj<Tool<'a>>>>,
    transcode: Option<Transcode>,
}

/// The message list: as the driver's [`Transcode`] wrote it, or read.
#[derive(Debug, Clone, Copy)]
pub enum Messages<'r, 'a> {
    /// The provider's list items, comma-separated, without the brackets.
    Written(&'r [u8]),
    Read(&'r [Obj<Message<'a>>]),
}

impl<'a> Fields<'a> for Request<'a> {
    fn field(&mut self, key: Cow<'a, str>, scan: &mut Scan<'a>) -> Result<(), Refused> {
        match &*key {
            "model" => self.model = raw(scan)?,
            "max_tokens" => self.max_tokens = raw(scan)?,
            "system" => self.system = raw(scan)?,
            "params" => self.params = Some(Read::read(scan)?),
            "messages" => {
                // The runtime's own compact form, written by the driver or read in one loop;
                // anything else (or anything those loops do not know) by the general reader.
                scan.peek();
                self.written = self.transcode.and_then(|transcode| written(scan, transcode));
                self.messages = match self.written {
                    Some(_) => None,
                    None => Some(match fast::messages(scan) {
                        Some(list) => List::Items(list),
                        None => Read::read(scan)?,
                    }),
                };
            }
            "tools" => self.tools = Some(Read::read(scan)?),
            _ => skip(scan)?,
        }
        Ok(())
    }
}

impl<'a> Request<'a> {
    /// `model`: a non-empty string (its JSON text).
    pub fn model(&self) -> Result<&Raw<'a>, String> {
        self.model
            .as_ref()
            .filter(|m| m.is_nonempty_string())
            .ok_or_else(|| "`model` must be a non-empty string".into())
    }

    /// `max_tokens`: a positive integer.
    pub fn max_tokens(&self) -> Result<u64, String> {
        let n = self.max_tokens.as_ref().and_then(Raw::as_u64).filter(|n| *n > 0);
        n.ok_or_else(|| "`max_tokens` must be a positive integer".into())
    }

    /// `system`: `None` when absent, `null` or `""`; else a string.
    pub fn system(&self) -> Result<Option<&Raw<'a>>, String> {
        match &self.system {
            None => Ok(None),
            Some(s) if s.is_null() => Ok(None),
            Some(s) if s.is_string() => Ok(s.is_nonempty_string().then_some(s)),
            Some(_) => Err("`system` must be a string".into()),
        }
    }

    /// `params`' entries (none when absent or `null`), each key once.
    pub fn params(&self) -> Result<&[(Cow<'a, str>, Raw<'a>)], String> {
        match &self.params {
            None => Ok(&[]),
            Some(p) => match p.shape {
                Shape::Null => Ok(&[]),
                Shape::Object => Ok(&p.fields.0),
                Shape::Other => Err("`params` must be an object".into()),
            },
        }
    }

    /// `messages`: an array.
    pub fn messages(&self) -> Result<Messages<'_, 'a>, String> {
        match (&self.written, &self.messages) {
            (Some(written), _) => Ok(Messages::Written(written)),
            (None, Some(List::Items(m))) => Ok(Messages::Read(m)),
            _ => Err("`messages` must be an array".into()),
        }
    }

    /// `tools` (none when absent or `null`).
    pub fn tools(&self) -> Result<&[Obj<Tool<'a>>], String> {
        match &self.tools {
            None | Some(List::Null) => Ok(&[]),
            Some(List::Items(t)) => Ok(t),
            Some(List::Other) => Err("`tools` must be an array".into()),
        }
    }
}

/// The list at `scan`'s position written by `transcode`, and `scan` moved past it; `None`
/// with `scan` untouched when `transcode` did not answer.
fn written(scan: &mut Scan, transcode: Transcode) -> Option<Vec<u8>> {
    let mut cursor = Cursor::new(scan.text(), scan.position(), scan.depth());
    // The provider's list is about as long as the rest of the input.
    let mut out = Vec::with_capacity(scan.text().len() - scan.position() + 64);
    transcode(&mut cursor, &mut out)?;
    scan.skip_to(cursor.position());
    Some(out)
}

/// `params`' entries in input order; a duplicate key replaces the value.
#[derive(Debug, Default)]
pub struct Params<'a>(Vec<(Cow<'a, str>, Raw<'a>)>);

impl<'a> Fields<'a> for Params<'a> {
    fn field(&mut self, key: Cow<'a, str>, scan: &mut Scan<'a>) -> Result<(), Refused> {
        let value = Raw::read(scan)?;
        match self.0.iter_mut().find(|(k, _)| *k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key, value)),
        }
        Ok(())
    }
}

/// Where a field sits, for error messages: `messages[2]`,
/// `messages[2].content[0]`, `tools[1]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum At {
    Message(usize),
    Block(usize, usize),
    Tool(usize),
}

impl fmt::Display for At {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            At::Message(i) => write!(f, "messages[{i}]"),
            At::Block(i, j) => write!(f, "messages[{i}].content[{j}]"),
            At::Tool(i) => write!(f, "tools[{i}]"),
        }
    }
}

/// `field` as a string, or `{at}.{key} must be a string`.
fn string<'r, 'a>(field: &'r Option<Raw<'a>>, at: impl fmt::Display, key: &str) -> Result<&'r Raw<'a>, String> {
    field.as_ref().filter(|v| v.is_string()).ok_or_else(|| format!("{at}.{key} must be a string"))
}

/// One message (all fields absent when it is not an object).
#[derive(Debug, Default)]
pub struct Message<'a> {
    role: Option<Raw<'a>>,
    content: Content<'a>,
    tool_call_id: Option<Raw<'a>>,
    is_error: Option<Raw<'a>>,
}

impl<'a> Fields<'a> for Message<'a> {
    fn field(&mut self, key: Cow<'a, str>, scan: &mut Scan<'a>) -> Result<(), Refused> {
        match &*key {
            "role" => self.role = raw(scan)?,
            "content" => self.content = Read::read(scan)?,
            "tool_call_id" => self.tool_call_id = raw(scan)?,
            "is_error" => self.is_error = raw(scan)?,
            _ => skip(scan)?,
        }
        Ok(())
    }
}

impl<'a> Message<'a> {
    /// The role, decoded; message `i` of the list.
    pub fn role(&self, i: usize) -> Result<Cow<'_, str>, String> {
        // The runtime writes roles without escapes: the literal is compared before decoding.
        if let Some(role) = self.role.as_ref().and_then(|r| plain_literal(r, &["assistant", "tool", "user", "system"]))
        {
            return Ok(Cow::Borrowed(role));
        }
        self.role.as_ref().and_then(Raw::decoded).ok_or_else(|| format!("{}.role must be a string", At::Message(i)))
    }

    /// The blocks (none when `content` is absent or `null`; a bare string
    /// reads as one text block).
    pub fn blocks(&self, i: usize) -> Result<&[Obj<Block<'a>>], String> {
        match &self.content {
            Content::Null => Ok(&[]),
            Content::One(b) => Ok(std::slice::from_ref(b)),
            Content::Many(b) => Ok(b),
            Content::Other => Err(format!("{}.content must be an array of blocks", At::Message(i))),
        }
    }

    /// A tool message's non-empty `tool_call_id`.
    pub fn tool_call_id(&self, i: usize) -> Result<&Raw<'a>, String> {
        let id = self.tool_call_id.as_ref().filter(|id| id.is_nonempty_string());
        id.ok_or_else(|| format!("{}: a tool message needs a non-empty `tool_call_id`", At::Message(i)))
    }

    /// `is_error` is `true` (any other value, or none, is false).
    pub fn is_error(&self) -> bool {
        self.is_error.as_ref().is_some_and(Raw::is_true)
    }
}

/// A message's `content`. Most messages hold one block, kept without an
/// allocation of its own.
#[derive(Debug, Default)]
enum Content<'a> {
    #[default]
    Null,
    One(Obj<Block<'a>>),
    Many(Vec<Obj<Block<'a>>>),
    Other,
}

impl<'a> Content<'a> {
    fn push(&mut self, block: Obj<Block<'a>>) {
        *self = match std::mem::take(self) {
            Content::Many(blocks) if blocks.is_empty() => Content::One(block),
            Content::One(first) => Content::Many(vec![first, block]),
            Content::Many(mut blocks) => {
                blocks.push(block);
                Content::Many(blocks)
            }
            // Not reached: `read` starts an array with `Many`.
            Content::Null | Content::Other => Content::One(block),
        }
    }
}

impl<'a> Read<'a> for Content<'a> {
    fn read(scan: &mut Scan<'a>) -> Result<Self, Refused> {
        match scan.peek() {
            // A bare string reads as one text block.
            Some(b'"') => {
                let text = Raw::string_literal(scan.string()?)?;
                let text = Block { kind: Some(Raw::literal("\"text\"")), text: Some(text), ..Block::default() };
                Ok(Content::One(Obj { shape: Shape::Object, fields: text }))
            }
            Some(b'[') => {
                let mut content = Content::Many(Vec::new());
                scan.array(|scan| Obj::read(scan).map(|block| content.push(block)))?;
                Ok(content)
            }
            Some(b'n') => skip(scan).map(|()| Content::Null),
            _ => skip(scan).map(|()| Content::Other),
        }
    }
}

/// A block's `type`, as far as the runtime knows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Text,
    ToolCall,
    Thinking,
    RedactedThinking,
    Image,
    /// Any other type, no type, or a block that is not an object.
    Other,
}

/// One content block (all fields absent when it is not an object).
#[derive(Debug, Default)]
pub struct Block<'a> {
    kind: Option<Raw<'a>>,
    text: Option<Raw<'a>>,
    id: Option<Raw<'a>>,
    name: Option<Raw<'a>>,
    input: Option<Raw<'a>>,
    signature: Option<Raw<'a>>,
    data: Option<Raw<'a>>,
    // Boxed: rare, and a block is kept inline in its message.
    source: Option<Box<Obj<Source<'a>>>>,
}

impl<'a> Fields<'a> for Block<'a> {
    fn field(&mut self, key: Cow<'a, str>, scan: &mut Scan<'a>) -> Result<(), Refused> {
        match &*key {
            "type" => self.kind = raw(scan)?,
            "text" => self.text = raw(scan)?,
            "id" => self.id = raw(scan)?,
            "name" => self.name = raw(scan)?,
            "input" => self.input = raw(scan)?,
            "signature" => self.signature = raw(scan)?,
            "data" => self.data = raw(scan)?,
            "source" => self.source = Some(Box::new(Read::read(scan)?)),
            _ => skip(scan)?,
        }
        Ok(())
    }
}

impl<'a> Block<'a> {
    pub fn kind(&self) -> Kind {
        // The common types as the runtime writes them, compared before decoding.
        match self.kind.as_ref().and_then(|k| plain_literal(k, &["text", "tool_call"])) {
            Some("text") => return Kind::Text,
            Some("tool_call") => return Kind::ToolCall,
            _ => {}
        }
        match self.kind.as_ref().and_then(Raw::decoded).as_deref() {
            Some("text") => Kind::Text,
            Some("tool_call") => Kind::ToolCall,
            Some("thinking") => Kind::Thinking,
            Some("redacted_thinking") => Kind::RedactedThinking,
            Some("image") => Kind::Image,
            _ => Kind::Other,
        }
    }

    /// `text`: a string.
    pub fn text(&self, at: At) -> Result<&Raw<'a>, String> {
        string(&self.text, at, "text")
    }

    /// A tool call's `id`: a string.
    pub fn id(&self, at: At) -> Result<&Raw<'a>, String> {
        string(&self.id, at, "id")
    }

    /// A tool call's `name`: a string.
    pub fn name(&self, at: At) -> Result<&Raw<'a>, String> {
        string(&self.name, at, "name")
    }

    /// A redacted thinking block's `data`: a string.
    pub fn data(&self, at: At) -> Result<&Raw<'a>, String> {
        string(&self.data, at, "data")
    }

    /// A tool call's `input`, `None` when absent or `null`.
    pub fn input(&self) -> Option<&Raw<'a>> {
        self.input.as_ref().filter(|i| !i.is_null())
    }

    /// A thinking block's `signature` when it is a non-empty string.
    pub fn signature(&self) -> Option<&Raw<'a>> {
        self.signature.as_ref().filter(|s| s.is_nonempty_string())
    }

    /// An image's `source`: `(media_type, data)`, both strings.
    pub fn source(&self, at: At) -> Result<(&Raw<'a>, &Raw<'a>), String> {
        let source = self.source.as_ref().ok_or_else(|| format!("{at}.source is missing"))?;
        let at = InSource(at);
        Ok((string(&source.fields.media_type, at, "media_type")?, string(&source.fields.data, at, "data")?))
    }
}

/// `messages[i].content[j].source`, for error messages.
#[derive(Clone, Copy)]
struct InSource(At);

impl fmt::Display for InSource {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        write!(f, "{}.source", self.0)
    }
}

/// An image block's `source`.
#[derive(Debug, Default)]
pub struct Source<'a> {
    media_type: Option<Raw<'a>>,
    data: Option<Raw<'a>>,
}

impl<'a> Fields<'a> for Source<'a> {
    fn field(&mut self, key: Cow<'a, str>, scan: &mut Scan<'a>) -> Result<(), Refused> {
        match &*key {
            "media_type" => self.media_type = raw(scan)?,
            "data" => self.data = raw(scan)?,
            _ => skip(scan)?,
        }
        Ok(())
    }
}

#[path = "neutral_tools.rs"]
mod tools;
pub use tools::{Schema, Tool};

#[path = "neutral_fast.rs"]
mod fast;

/// `raw`'s content when `raw` is exactly one of `words` written as a JSON string without
/// escapes (what decoding it would give, without decoding).
fn plain_literal<'r>(raw: &'r Raw<'_>, words: &[&str]) -> Option<&'r str> {
    let inner = raw.json().strip_prefix('"')?.strip_suffix('"')?;
    words.contains(&inner).then_some(inner)
}

#[cfg(test)]
#[path = "neutral_tests.rs"]
mod tests;
