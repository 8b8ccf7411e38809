//! A driver request as its driver receives it: the JSON text of `tool-input.data`.
//!
//! What it is for: a call's request is serialized once, when it is planned, and shared (behind
//! an `Arc`) by the call's attempts; the gateway hands the text to the driver as it is. The
//! agent loop builds it from the JSON each message got when it entered the context
//! ([`WireRequest::with_messages`]), so a turn does not clone or re-serialize the history.
//!
//! What it guarantees: [`RequestFields`] serializes in [`DriverRequest`]'s field order with the
//! same skip rules, so `with_messages` with each message's own JSON is byte for byte
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

    /// `request`'s fields (its own `messages` are not looked at) with `messages` as given.
    pub fn with_messages(request: &DriverRequest, messages: &[&RawValue]) -> Result<Self, serde_json::Error> {
        let json = serde_json::to_string(&RequestFields::of(request, messages))?;
        Ok(WireRequest { model: request.model.clone(), json })
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
