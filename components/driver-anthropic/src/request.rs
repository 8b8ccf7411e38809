//! Neutral request → Anthropic Messages request body.
//!
//! Input is the runtime's provider-neutral request (CONTRACT §3), read by
//! [`guest_http::neutral`]; output is the JSON body for `POST /v1/messages`
//! with `stream: true`, written in one pass ([`guest_http::wire`]): texts,
//! ids, tool inputs, schemas and `params` values are copied from the input
//! as they came, never decoded and re-encoded, and no value tree is built.
//!
//! What it does beyond a field-for-field copy:
//! - consecutive `tool` messages become ONE `user` message holding one
//!   `tool_result` block each (the shape Anthropic requires);
//! - every block is rebuilt from the fields Anthropic knows, so envelope
//!   extras such as `produced_by` never reach the provider;
//! - block types a role cannot carry, unknown block types, empty text blocks
//!   (refused by the API) and thinking blocks without a signature (they cannot
//!   be replayed) are skipped; a message left with no content is dropped;
//! - a tool call's `input` given as a JSON string holding an object is sent
//!   as that object; a missing or `null` input as `{}`;
//! - a tool schema without `type` gets `"type": "object"` (so `{}` works).
//!
//! Errors name the field and are checked in this order: the request is an
//! object, `model`, `max_tokens`, `params`, `system`, each message in turn
//! (role, content, then its blocks), `tools`.
//!
//! Deliberately not done: `continuation_id` and `prompt_cache_key` are not
//! sent (Anthropic keeps no conversation state and has no such field), no
//! `cache_control` breakpoints are added, and `params` cannot replace the
//! keys this module builds (`model`, `max_tokens`, `system`, `messages`,
//! `tools`, `stream`); such keys in `params` are ignored. Keys come out in
//! the order written here, not sorted; a value copied verbatim keeps the
//! input's spacing and escapes (the runtime sends compact JSON).

use std::borrow::Cow;

use guest_http::lenient::valid_json;
use guest_http::neutral::{At, Block, Input, Kind, Message, Messages, Obj, Raw, Tool};
use guest_http::wire::{any_key, comma, key, member, object_with};

/// Keys of the body this module owns; `params` cannot override them.
const RESERVED: [&str; 6] = ["model", "max_tokens", "system", "messages", "tools", "stream"];

/// Translate the neutral request into the body. The error says which field
/// is wrong.
pub fn translate(input: &Input) -> Result<Vec<u8>, String> {
    let req = input.request()?;
    let model = req.model()?;
    let max_tokens = req.max_tokens()?;
    let mut out = Vec::with_capacity(input.size() + input.size() / 8 + 256);
    out.push(b'{');
    for (name, value) in req.params()? {
        if !RESERVED.contains(&&**name) {
            any_key(&mut out, name);
            out.extend_from_slice(value.json().as_bytes());
        }
    }
    member(&mut out, "model", model.json());
    member(&mut out, "max_tokens", &max_tokens.to_string());
    if let Some(system) = req.system()? {
        member(&mut out, "system", system.json());
    }
    key(&mut out, "messages");
    match req.messages()? {
        Messages::Written(items) => {
            out.push(b'[');
            out.extend_from_slice(items);
            out.push(b']');
        }
        Messages::Read(list) => messages(&mut out, list)?,
    }
    let tools = req.tools()?;
    if !tools.is_empty() {
        key(&mut out, "tools");
        out.push(b'[');
        for (i, tool) in tools.iter().enumerate() {
            write_tool(&mut out, &tool.fields, i)?;
        }
        out.push(b']');
    }
    member(&mut out, "stream", "true");
    out.push(b'}');
    Ok(out)
}

fn messages(out: &mut Vec<u8>, list: &[Obj<Message>]) -> Result<(), String> {
    out.push(b'[');
    // Whether a user message of `tool_result` blocks is open.
    let mut results = false;
    for (i, msg) in list.iter().enumerate() {
        let msg = &msg.fields;
        let role = msg.role(i)?;
        let blocks = msg.blocks(i)?;
        if role == "tool" {
            if !results {
                comma(out);
                out.extend_from_slice(br#"{"role":"user","content":["#);
                results = true;
            }
            tool_result(out, msg, blocks, i)?;
            continue;
        }
        if results {
            out.extend_from_slice(b"]}");
            results = false;
        }
        let assistant = match &*role {
            "user" => false,
            "assistant" => true,
            other => return Err(format!("{}.role: unknown role `{other}` (user, assistant or tool)", At::Message(i))),
        };
        // Written, then taken back if no block survives.
        let mark = out.len();
        comma(out);
        out.extend_from_slice(if assistant {
            br#"{"role":"assistant","content":["#
        } else {
            br#"{"role":"user","content":["#
        });
        let start = out.len();
        for (j, block) in blocks.iter().enumerate() {
            let (block, at) = (&block.fields, At::Block(i, j));
            match block.kind() {
                Kind::Text => text(out, block, at)?,
                Kind::Image if !assistant => image(out, block, at)?,
                Kind::ToolCall if assistant => tool_use(out, block, at)?,
                Kind::Thinking if assistant => thinking(out, block, at)?,
                Kind::RedactedThinking if assistant => {
                    comma(out);
                    out.extend_from_slice(br#"{"type":"redacted_thinking","data":"#);
                    out.extend_from_slice(block.data(at)?.json().as_bytes());
                    out.push(b'}');
                }
                _ => {}
            }
        }
        if out.len() == start {
            out.truncate(mark);
        } else {
            out.extend_from_slice(b"]}");
        }
    }
    if results {
        out.extend_from_slice(b"]}");
    }
    out.push(b']');
    Ok(())
}

/// A text block, unless its text is empty.
fn text(out: &mut Vec<u8>, block: &Block, at: At) -> Result<(), String> {
    let text = block.text(at)?;
    if text.is_nonempty_string() {
        comma(out);
        out.extend_from_slice(br#"{"type":"text","text":"#);
        out.extend_from_slice(text.json().as_bytes());
        out.push(b'}');
    }
    Ok(())
}

fn image(out: &mut Vec<u8>, block: &Block, at: At) -> Result<(), String> {
    let (media_type, data) = block.source(at)?;
    comma(out);
    out.extend_from_slice(br#"{"type":"image","source":{"type":"base64","media_type":"#);
    out.extend_from_slice(media_type.json().as_bytes());
    member(out, "data", data.json());
    out.extend_from_slice(b"}}");
    Ok(())
}

fn tool_use(out: &mut Vec<u8>, block: &Block, at: At) -> Result<(), String> {
    let id = block.id(at)?;
    let name = block.name(at)?;
    comma(out);
    out.extend_from_slice(br#"{"type":"tool_use","id":"#);
    out.extend_from_slice(id.json().as_bytes());
    member(out, "name", name.json());
    member(out, "input", &tool_input(block.input()));
    out.push(b'}');
    Ok(())
}

/// A tool call's input as Anthropic wants it: an object. A JSON string
/// holding an object is unwrapped (sent as the text it holds); a missing
/// or null input is `{}`.
fn tool_input<'r>(input: Option<&'r Raw>) -> Cow<'r, str> {
    let Some(input) = input else { return Cow::Borrowed("{}") };
    if let Some(held) = input.decoded() {
        let held_trimmed = held.trim_matches([' ', '\t', '\n', '\r']);
        if held_trimmed.starts_with('{') && valid_json(held_trimmed) {
            return Cow::Owned(held_trimmed.to_owned());
        }
    }
    Cow::Borrowed(input.json())
}

/// A thinking block, unless it has no signature.
fn thinking(out: &mut Vec<u8>, block: &Block, at: At) -> Result<(), String> {
    let Some(signature) = block.signature() else { return Ok(()) };
    let text = block.text(at)?;
    comma(out);
    out.extend_from_slice(br#"{"type":"thinking","thinking":"#);
    out.extend_from_slice(text.json().as_bytes());
    member(out, "signature", signature.json());
    out.push(b'}');
    Ok(())
}

fn tool_result(out: &mut Vec<u8>, msg: &Message, blocks: &[Obj<Block>], i: usize) -> Result<(), String> {
    let id = msg.tool_call_id(i)?;
    comma(out);
    out.extend_from_slice(br#"{"type":"tool_result","tool_use_id":"#);
    out.extend_from_slice(id.json().as_bytes());
    member(out, "is_error", if msg.is_error() { "true" } else { "false" });
    let mark = out.len();
    key(out, "content");
    out.push(b'[');
    let start = out.len();
    for (j, block) in blocks.iter().enumerate() {
        let (block, at) = (&block.fields, At::Block(i, j));
        match block.kind() {
            Kind::Text => text(out, block, at)?,
            Kind::Image => image(out, block, at)?,
            _ => {}
        }
    }
    if out.len() == start {
        out.truncate(mark);
    } else {
        out.push(b']');
    }
    out.push(b'}');
    Ok(())
}

fn write_tool(out: &mut Vec<u8>, tool: &Tool, i: usize) -> Result<(), String> {
    let name = tool.name(i)?;
    let schema = tool.parameters(i)?;
    comma(out);
    out.extend_from_slice(br#"{"name":"#);
    out.extend_from_slice(name.json().as_bytes());
    key(out, "input_schema");
    let extra: &[(&str, &str)] = if schema.kind.is_none() { &[("type", "\"object\"")] } else { &[] };
    object_with(out, schema.json, extra);
    if let Some(description) = tool.description() {
        member(out, "description", description.json());
    }
    out.push(b'}');
    Ok(())
}

pub mod fast;
#[cfg(test)]
mod old;
#[cfg(test)]
mod tests;
