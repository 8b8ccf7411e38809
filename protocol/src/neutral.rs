//! The provider-neutral inference format (CONTRACT §3).
//!
//! The runtime owns the conversation in these types; a driver translates them to its provider
//! on every request and back. Unknown block types survive a round trip through
//! [`Block::Other`], so a newer driver's blocks are never dropped by the runtime.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Who said a message.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    /// The user (a task's text).
    User,
    /// The model.
    Assistant,
    /// A tool's result, answering one `tool_call`.
    Tool,
}

/// Which driver choice produced an assistant message (written only once alternates exist).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ProducedBy {
    /// Driver artifact name.
    pub driver: String,
    /// Model string.
    pub model: String,
}

/// One message of the conversation.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Message {
    /// Speaker.
    pub role: Role,
    /// Content blocks.
    pub content: Vec<Block>,
    /// For `tool` messages: the call this answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_call_id: Option<String>,
    /// For `tool` messages: whether the result is an error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub is_error: Option<bool>,
    /// For assistant messages once alternates are declared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub produced_by: Option<ProducedBy>,
}

impl Message {
    /// A user message with one text block.
    pub fn user_text(text: impl Into<String>) -> Self {
        Message {
            role: Role::User,
            content: vec![Block::Text { text: text.into() }],
            tool_call_id: None,
            is_error: None,
            produced_by: None,
        }
    }

    /// A tool result message.
    pub fn tool_result(call_id: impl Into<String>, text: impl Into<String>, is_error: bool) -> Self {
        Message {
            role: Role::Tool,
            content: vec![Block::Text { text: text.into() }],
            tool_call_id: Some(call_id.into()),
            is_error: Some(is_error),
            produced_by: None,
        }
    }

    /// The concatenated text blocks.
    pub fn text(&self) -> String {
        self.content
            .iter()
            .filter_map(|b| if let Block::Text { text } = b { Some(text.as_str()) } else { None })
            .collect()
    }
}

/// Image bytes carried inline.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct ImageSource {
    /// e.g. `image/png`.
    pub media_type: String,
    /// Base64 data.
    pub data: String,
}

/// One content block.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Block {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// The model asks for a tool call.
    ToolCall {
        /// Call id, echoed by the tool message that answers it.
        id: String,
        /// Tool name.
        name: String,
        /// Input JSON.
        input: Value,
    },
    /// Visible reasoning with its provider signature.
    Thinking {
        /// Reasoning text.
        text: String,
        /// Provider signature (opaque).
        #[serde(default)]
        signature: String,
    },
    /// Reasoning the provider keeps opaque.
    RedactedThinking {
        /// Opaque data.
        data: String,
    },
    /// An image.
    Image {
        /// The bytes.
        source: ImageSource,
    },
    /// A block type this runtime does not know; kept as it came.
    #[serde(untagged)]
    Other(Value),
}

/// A tool offered to the model.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ToolSpec {
    /// Name the model calls it by.
    pub name: String,
    /// What it does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON Schema of the input; `{}` means an empty object schema.
    pub parameters: Value,
}

/// The request a driver receives in `tool-input.data`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DriverRequest {
    /// Model string.
    pub model: String,
    /// Output cap for this call.
    pub max_tokens: u32,
    /// System prompt (empty when none).
    pub system: String,
    /// The conversation (or only its tail when a continuation id is held).
    pub messages: Vec<Message>,
    /// Tools offered.
    pub tools: Vec<ToolSpec>,
    /// Passed through to the provider.
    pub params: serde_json::Map<String, Value>,
    /// Held continuation id, when any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continuation_id: Option<String>,
    /// `<capsule name>:<version>[:<context id>]`.
    pub prompt_cache_key: String,
}

/// Why the model stopped.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The reply is complete.
    EndTurn,
    /// The model asks for tool calls.
    ToolCall,
    /// The output cap was reached.
    MaxTokens,
    /// The call failed.
    Error,
}

/// Token counts as the provider reported them.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
pub struct Usage {
    /// Input tokens.
    #[serde(default)]
    pub input_tokens: u64,
    /// Output tokens.
    #[serde(default)]
    pub output_tokens: u64,
    /// Input tokens read from the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cached_tokens: Option<u64>,
    /// Input tokens written to the provider's cache.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_tokens: Option<u64>,
}

/// The response a driver returns in `tool-result.data`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct DriverResponse {
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// The assistant's blocks.
    #[serde(default)]
    pub content: Vec<Block>,
    /// The failure, when `stop_reason` is `error`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Usage as reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_round_trip_with_their_type_tags() {
        let m = Message {
            role: Role::Assistant,
            content: vec![
                Block::Thinking { text: "hm".into(), signature: "s".into() },
                Block::ToolCall { id: "c1".into(), name: "files".into(), input: serde_json::json!({"op":"list"}) },
                Block::Other(serde_json::json!({"type":"future_block","x":1})),
            ],
            tool_call_id: None,
            is_error: None,
            produced_by: None,
        };
        let v = serde_json::to_value(&m).expect("serialize");
        assert_eq!(v["content"][0]["type"], "thinking");
        assert_eq!(v["content"][1]["type"], "tool_call");
        assert_eq!(v["content"][2]["type"], "future_block");
        let back: Message = serde_json::from_value(v).expect("deserialize");
        assert_eq!(back, m);
    }
}
