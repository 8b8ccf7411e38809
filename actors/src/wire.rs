//! A driver request as its driver receives it: the JSON text of `tool-input.data`.
//!
//! What it is for: a call's request is serialized once, when it is planned, and shared (behind
//! an `Arc`) by the call's attempts; the gateway hands the text to the driver as it is. The
//! agent loop builds it from the JSON each message got when it entered the context and from
//! an [`Envelope`], the fields serialized once while they do not change
//! ([`Envelope::with_messages`]), so a turn clones or re-serializes neither the history nor
//! the system prompt and tools.
//!
//! What it guarantees: [`RequestFields`] serializes in [`DriverRequest`]'s field order with the
//! same skip rules, so an envelope with each message's own JSON spliced in is byte for byte
//! `serde_json::to_string` of the whole request (tested in `agent_loop::context`).
//!
//! What it does not do: check the messages' JSON (it is produced by serializing `Message`s).

use capsule_protocol::neutral::{DriverRequest, ToolSpec};
use serde::Serialize;
use serde_json::value::RawValue;

/// A driver request's JSON and the model it names (the gateway sets `MURMUR_INFERENCE_MODEL`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireRequest {
    /// `DriverRequest::model`.
    pub model: String,
    /// The whole request, serialized.
    pub json: String,
}

impl WireRequest {
    /// Serialize a whole request.
    pub fn of(request: &DriverRequest) -> Result<Self, serde_json::Error> {
        Ok(WireRequest { model: request.model.clone(), json: serde_json::to_string(request)? })
    }
}

/// A [`DriverRequest`]'s fields by reference with `messages` replaced by `M`, serialized in the
/// same order and with the same skip rules as `DriverRequest` itself.
#[derive(Serialize)]
pub(crate) struct RequestFields<'a, M: Serialize> {
    model: &'a str,
    max_tokens: u32,
    system: &'a str,
    messages: M,
    tools: &'a [ToolSpec],
    params: &'a serde_json::Map<String, serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    continuation_id: Option<&'a str>,
    prompt_cache_key: &'a str,
}

impl<'a, M: Serialize> RequestFields<'a, M> {
    /// `request`'s fields with `messages`.
    pub(crate) fn of(request: &'a DriverRequest, messages: M) -> Self {
        RequestFields {
            model: &request.model,
            max_tokens: request.max_tokens,
            system: &request.system,
            messages,
            tools: &request.tools,
            params: &request.params,
            continuation_id: request.continuation_id.as_deref(),
            prompt_cache_key: &request.prompt_cache_key,
        }
    }
}

/// What a request's fields without its messages depend on besides the loop's fixed system
/// prompt, tools and params: an [`Envelope`] built for one key serves every turn with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EnvelopeKey<'a> {
    pub model: &'a str,
    pub max_tokens: u32,
    pub continuation_id: Option<&'a str>,
    pub prompt_cache_key: &'a str,
}

/// A request serialized with `"messages":[]`, kept while its fields stay the same. The text
/// is what the spend meter counts for the fields; a turn's request is that text with the
/// messages spliced in between the brackets, so the system prompt and the tool schemas are
/// escaped once per key, not once per turn.
#[derive(Debug)]
pub(crate) struct Envelope {
    model: String,
    max_tokens: u32,
    continuation_id: Option<String>,
    prompt_cache_key: String,
    /// `serde_json` of the request's fields with `"messages":[]`.
    text: String,
    /// Where the `[]` of `messages` is in `text`.
    at: usize,
}

impl Envelope {
    /// Serialize `request`'s fields (its messages are not looked at).
    pub(crate) fn of(request: &DriverRequest) -> Result<Envelope, serde_json::Error> {
        let text = serde_json::to_string(&RequestFields::of(request, [(); 0]))?;
        // The fields before `messages` are a string, a number and a string: the first
        // unescaped `"messages":[]` is the key itself.
        let at = text.find("\"messages\":[]").map(|i| i + "\"messages\":".len()).ok_or_else(|| {
            <serde_json::Error as serde::ser::Error>::custom("a request's fields have no `messages` key")
        })?;
        Ok(Envelope {
            model: request.model.clone(),
            max_tokens: request.max_tokens,
            continuation_id: request.continuation_id.clone(),
            prompt_cache_key: request.prompt_cache_key.clone(),
            text,
            at,
        })
    }

    /// Whether it was built for `key`.
    pub(crate) fn is_for(&self, key: &EnvelopeKey<'_>) -> bool {
        self.model == key.model
            && self.max_tokens == key.max_tokens
            && self.continuation_id.as_deref() == key.continuation_id
            && self.prompt_cache_key == key.prompt_cache_key
    }

    /// The fields with `"messages":[]`, as the spend meter counts them.
    pub(crate) fn text(&self) -> &str {
        &self.text
    }

    /// The request it was built from with `messages` (each message's JSON): byte for byte
    /// `serde_json::to_string` of that request holding those messages.
    pub(crate) fn with_messages(&self, messages: &[&RawValue]) -> WireRequest {
        let size: usize = messages.iter().map(|m| m.get().len() + 1).sum();
        let mut json = String::with_capacity(self.text.len() + size);
        json.push_str(&self.text[..self.at]);
        json.push('[');
        for (i, m) in messages.iter().enumerate() {
            if i > 0 {
                json.push(',');
            }
            json.push_str(m.get());
        }
        json.push_str(&self.text[self.at + 1..]);
        WireRequest { model: self.model.clone(), json }
    }
}
