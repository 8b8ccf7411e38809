//! Neutral request → OpenAI Chat Completions request body.
//!
//! Input is the runtime's provider-neutral request (CONTRACT §3), read by
//! [`guest_http::neutral`]; output is the JSON body for
//! `POST {endpoint}/chat/completions` with `stream: true` and
//! `stream_options: {include_usage: true}`, written in one pass
//! ([`guest_http::wire`]): texts, ids, tool inputs, schemas and `params`
//! values are copied from the input as they came, never decoded and
//! re-encoded, and no value tree is built.
//!
//! Translation rules:
//! - a non-empty `system` becomes the first message, `{role: "system"}`;
//! - a user message whose blocks are all text is sent with a plain string
//!   `content`; one with an image is sent as content parts (`text` and
//!   `image_url` with a `data:<media_type>;base64,<data>` URL);
//! - an assistant message becomes `{role: "assistant", content, tool_calls?}`:
//!   `content` is its text (or `null` when it has none), each `tool_call`
//!   block becomes a `function` call whose `arguments` is the input as a
//!   JSON string: a string input that already holds JSON is sent as it is,
//!   a missing or null input as `"{}"`, any other input as its JSON text
//!   (as it came: the runtime sends compact JSON);
//! - each neutral `tool` message becomes its own `{role: "tool",
//!   tool_call_id, content}` message. Chat Completions has no error flag on
//!   a tool result, so when `is_error` is true the content is prefixed with
//!   `error: ` (unless it already starts with that), which is how the model
//!   learns that the call failed;
//! - several text blocks of one message are joined with `\n`; empty text
//!   blocks are dropped; a user or assistant message left with nothing to
//!   send is dropped (a tool message is always sent, even empty, because
//!   every tool call must be answered);
//! - a tool's `parameters` schema without `type` gets `"type": "object"`,
//!   and an object schema without `properties` gets `"properties": {}` (so
//!   `{}` becomes `{"type":"object","properties":{}}`);
//! - every key of `params` is copied to the top level and may replace
//!   `max_tokens` or `stream_options`; when `params` has
//!   `max_completion_tokens` and no `max_tokens`, `max_tokens` is not sent
//!   (newer OpenAI models refuse the two together).
//!
//! Errors name the field and are checked in this order: the request is an
//! object, `model`, `max_tokens`, `system`, each message in turn (role,
//! content, then its blocks; for an assistant message every text before
//! any tool call), `tools`, `params`.
//!
//! Deliberately not done: `thinking` and `redacted_thinking` blocks are not
//! sent (Chat Completions takes no reasoning input); images inside tool
//! results are not sent (a `tool` message carries text only); unknown block
//! types are skipped. `params` cannot replace the keys built here from the
//! conversation (`model`, `messages`, `tools`, `stream`); such keys in
//! `params` are ignored. `produced_by`, `prompt_cache_key` and
//! `continuation_id` never reach the provider: every message is rebuilt from
//! the fields Chat Completions knows. Keys come out in the order written
//! here, not sorted.

use guest_http::lenient::valid_json;
use guest_http::neutral::{At, Block, Input, Kind, Message, Messages, Obj, Raw, Tool};
use guest_http::wire::{any_key, comma, key, member, object_with, string};

/// Keys built from the conversation; `params` cannot override them.
const RESERVED: [&str; 4] = ["model", "messages", "tools", "stream"];

/// Translate the neutral request into the body. The error says which field
/// is wrong.
pub fn translate(input: &Input) -> Result<Vec<u8>, String> {
    let req = input.request()?;
    let model = req.model()?;
    let max_tokens = req.max_tokens()?;
    let mut out = Vec::with_capacity(input.size() + input.size() / 8 + 256);
    out.push(b'{');
    member(&mut out, "model", model.json());
    key(&mut out, "messages");
    out.push(b'[');
    if let Some(system) = req.system()? {
        out.extend_from_slice(br#"{"role":"system","content":"#);
        out.extend_from_slice(system.json().as_bytes());
        out.push(b'}');
    }
    let list = match req.messages()? {
        Messages::Read(list) => list,
        // Items a transcoder wrote (this driver passes none to `Input::parse_with`).
        Messages::Written(items) => {
            if !items.is_empty() {
                comma(&mut out);
                out.extend_from_slice(items);
            }
            &[]
        }
    };
    for (i, msg) in list.iter().enumerate() {
        let msg = &msg.fields;
        let role = msg.role(i)?;
        let blocks = msg.blocks(i)?;
        match &*role {
            "user" => user(&mut out, blocks, i)?,
            "assistant" => assistant(&mut out, blocks, i)?,
            "tool" => tool_message(&mut out, msg, blocks, i)?,
            other => return Err(format!("{}.role: unknown role `{other}` (user, assistant or tool)", At::Message(i))),
        }
    }
    out.push(b']');
    let tools = req.tools()?;
    if !tools.is_empty() {
        key(&mut out, "tools");
        out.push(b'[');
        for (i, tool) in tools.iter().enumerate() {
            write_tool(&mut out, &tool.fields, i)?;
        }
        out.push(b']');
    }
    let params = req.params()?;
    let has = |name: &str| params.iter().any(|(k, _)| k == name);
    if !has("max_tokens") && !has("max_completion_tokens") {
        member(&mut out, "max_tokens", &max_tokens.to_string());
    }
    member(&mut out, "stream", "true");
    if !has("stream_options") {
        member(&mut out, "stream_options", r#"{"include_usage":true}"#);
    }
    for (name, value) in params {
        if !RESERVED.contains(&&**name) {
            any_key(&mut out, name);
            out.extend_from_slice(value.json().as_bytes());
        }
    }
    out.push(b'}');
    Ok(out)
}

/// Check every text block's `text`, in order, and write the non-empty ones
/// joined with `\n` as the inside of a string literal. Returns the first
/// one written, if any.
fn texts<'r, 'a>(out: &mut Vec<u8>, blocks: &'r [Obj<Block<'a>>], i: usize) -> Result<Option<&'r Raw<'a>>, String> {
    let mut first = None;
    for (j, block) in blocks.iter().enumerate() {
        if block.fields.kind() != Kind::Text {
            continue;
        }
        let text = block.fields.text(At::Block(i, j))?;
        if let Some(escaped) = text.escaped().filter(|t| !t.is_empty()) {
            if first.is_some() {
                out.extend_from_slice(b"\\n");
            }
            out.extend_from_slice(escaped.as_bytes());
            first.get_or_insert(text);
        }
    }
    Ok(first)
}

fn user(out: &mut Vec<u8>, blocks: &[Obj<Block>], i: usize) -> Result<(), String> {
    let mark = out.len();
    comma(out);
    if !blocks.iter().any(|b| b.fields.kind() == Kind::Image) {
        out.extend_from_slice(br#"{"role":"user","content":""#);
        if texts(out, blocks, i)?.is_none() {
            out.truncate(mark);
        } else {
            out.extend_from_slice(b"\"}");
        }
        return Ok(());
    }
    out.extend_from_slice(br#"{"role":"user","content":["#);
    for (j, block) in blocks.iter().enumerate() {
        let (block, at) = (&block.fields, At::Block(i, j));
        match block.kind() {
            Kind::Text => {
                let text = block.text(at)?;
                if text.is_nonempty_string() {
                    comma(out);
                    out.extend_from_slice(br#"{"type":"text","text":"#);
                    out.extend_from_slice(text.json().as_bytes());
                    out.push(b'}');
                }
            }
            Kind::Image => {
                let (media_type, data) = block.source(at)?;
                comma(out);
                out.extend_from_slice(br#"{"type":"image_url","image_url":{"url":"data:"#);
                out.extend_from_slice(media_type.escaped().unwrap_or_default().as_bytes());
                out.extend_from_slice(b";base64,");
                out.extend_from_slice(data.escaped().unwrap_or_default().as_bytes());
                out.extend_from_slice(b"\"}}");
            }
            _ => {}
        }
    }
    out.extend_from_slice(b"]}");
    Ok(())
}

fn assistant(out: &mut Vec<u8>, blocks: &[Obj<Block>], i: usize) -> Result<(), String> {
    let head = begin_assistant(out, |out| Ok::<_, String>(texts(out, blocks, i)?.is_some()))?;
    for (j, block) in blocks.iter().enumerate() {
        let (block, at) = (&block.fields, At::Block(i, j));
        if block.kind() != Kind::ToolCall {
            continue;
        }
        let id = block.id(at)?;
        let name = block.name(at)?;
        comma(out);
        out.extend_from_slice(br#"{"id":"#);
        out.extend_from_slice(id.json().as_bytes());
        out.extend_from_slice(br#","type":"function","function":{"name":"#);
        out.extend_from_slice(name.json().as_bytes());
        key(out, "arguments");
        arguments(out, block.input());
        out.extend_from_slice(b"}}");
    }
    end_assistant(out, head);
    Ok(())
}

/// Where the parts of an assistant message begin, as [`begin_assistant`] wrote them.
struct AssistantHead {
    /// The message.
    mark: usize,
    /// Its `tool_calls` key.
    calls: usize,
    /// Its first call.
    first_call: usize,
    has_text: bool,
}

/// The start of an assistant message: its `content` (what `texts` writes, inside a string,
/// when it says it wrote something; else `null`) and the opening of its `tool_calls`.
fn begin_assistant<E>(
    out: &mut Vec<u8>,
    texts: impl FnOnce(&mut Vec<u8>) -> Result<bool, E>,
) -> Result<AssistantHead, E> {
    let mark = out.len();
    comma(out);
    out.extend_from_slice(br#"{"role":"assistant","content":"#);
    let content = out.len();
    out.push(b'"');
    let has_text = texts(out)?;
    if has_text {
        out.push(b'"');
    } else {
        out.truncate(content);
        out.extend_from_slice(b"null");
    }
    let calls = out.len();
    out.extend_from_slice(br#","tool_calls":["#);
    Ok(AssistantHead { mark, calls, first_call: out.len(), has_text })
}

/// The end of an assistant message: its `tool_calls` closed when they hold a call, taken out
/// when not; the whole message taken out when it has neither a text nor a call.
fn end_assistant(out: &mut Vec<u8>, head: AssistantHead) {
    if out.len() > head.first_call {
        out.push(b']');
    } else if head.has_text {
        out.truncate(head.calls);
    } else {
        out.truncate(head.mark);
        return;
    }
    out.push(b'}');
}

/// A tool call's input as Chat Completions wants it: a JSON string. A
/// string input that already holds JSON is sent as it is; a missing or null
/// input is `"{}"`.
fn arguments(out: &mut Vec<u8>, input: Option<&Raw>) {
    let Some(input) = input else {
        out.extend_from_slice(br#""{}""#);
        return;
    };
    match input.decoded() {
        Some(held) if valid_json(&held) => out.extend_from_slice(input.json().as_bytes()),
        // A string that is not JSON: sent as its JSON text, a string literal.
        Some(held) => string(out, Raw::quoted(&held).json()),
        None => string(out, input.json()),
    }
}

fn tool_message(out: &mut Vec<u8>, msg: &Message, blocks: &[Obj<Block>], i: usize) -> Result<(), String> {
    let id = msg.tool_call_id(i)?;
    comma(out);
    out.extend_from_slice(br#"{"role":"tool","tool_call_id":"#);
    out.extend_from_slice(id.json().as_bytes());
    out.extend_from_slice(br#","content":""#);
    let start = out.len();
    let first = texts(out, blocks, i)?;
    if msg.is_error() {
        match first.and_then(Raw::decoded) {
            None => out.extend_from_slice(b"error"),
            Some(text) if text.starts_with("error: ") => {}
            Some(_) => drop(out.splice(start..start, b"error: ".iter().copied())),
        }
    }
    out.extend_from_slice(b"\"}");
    Ok(())
}

fn write_tool(out: &mut Vec<u8>, tool: &Tool, i: usize) -> Result<(), String> {
    let name = tool.name(i)?;
    let schema = tool.parameters(i)?;
    comma(out);
    out.extend_from_slice(br#"{"type":"function","function":{"name":"#);
    out.extend_from_slice(name.json().as_bytes());
    key(out, "parameters");
    let is_object = match &schema.kind {
        None => true,
        Some(kind) => kind.decoded().is_some_and(|k| k == "object"),
    };
    const TYPE: (&str, &str) = ("type", "\"object\"");
    const PROPERTIES: (&str, &str) = ("properties", "{}");
    let extra: &[(&str, &str)] = match (schema.kind.is_none(), is_object && !schema.has_properties) {
        (true, true) => &[TYPE, PROPERTIES],
        (true, false) => &[TYPE],
        (false, true) => &[PROPERTIES],
        (false, false) => &[],
    };
    object_with(out, schema.json, extra);
    if let Some(description) = tool.description() {
        member(out, "description", description.json());
    }
    out.extend_from_slice(b"}}");
    Ok(())
}

pub mod fast;
#[cfg(test)]
mod old;
#[cfg(test)]
mod tests;
