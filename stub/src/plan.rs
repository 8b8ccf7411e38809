//! A turn cut into the pieces it will be streamed in, independent of any wire format.
//!
//! Both providers render the same [`Plan`], so a turn produces the same text pieces, tool-input
//! pieces, tool numbers and token counts whichever format asks for it.
//!
//! Guarantees: joining the pieces gives back the original text exactly; text is cut every
//! `chunk_chars` characters and tool input every `delta_bytes` bytes, both only on UTF-8 character
//! boundaries. Deliberately not here: HTTP errors, garbage and cuts, which the server handles
//! before or around rendering.

use crate::script::{Script, StreamError, Turn};

/// Everything a provider module needs to render one model answer.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    /// The script turn index (used in message ids).
    pub turn: usize,
    /// The model name echoed from the request.
    pub model: String,
    /// Seconds since the Unix epoch, for OpenAI's `created`.
    pub created: u64,
    /// Thinking pieces and the signature, when the turn thinks.
    pub thinking: Option<(Vec<String>, String)>,
    /// Text pieces, when the turn has text (possibly an empty list for empty text).
    pub text: Option<Vec<String>>,
    /// The tool calls.
    pub tools: Vec<PlannedTool>,
    /// Usage with defaults applied.
    pub usage: PlannedUsage,
    /// The error to send after the text, if any.
    pub stream_error: Option<StreamError>,
}

/// One tool call, with its input serialized and cut.
#[derive(Debug, Clone)]
pub(crate) struct PlannedTool {
    /// The id from the script, if it gave one.
    pub id: Option<String>,
    /// The stub's number for the call, used when there is no id.
    pub number: usize,
    /// The tool's name.
    pub name: String,
    /// The input as JSON.
    pub input: serde_json::Value,
    /// The compact serialization of `input`, cut into pieces.
    pub pieces: Vec<String>,
}

impl PlannedTool {
    /// The call id: the scripted one, or `<prefix><number>`.
    pub(crate) fn id(&self, prefix: &str) -> String {
        match &self.id {
            Some(id) => id.clone(),
            None => format!("{prefix}{}", self.number),
        }
    }

    /// The whole serialized input.
    pub(crate) fn arguments(&self) -> String {
        self.pieces.concat()
    }
}

/// Token counts to report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PlannedUsage {
    /// Prompt tokens.
    pub input: u64,
    /// Completion tokens.
    pub output: u64,
    /// Cached prompt tokens, when the script set them.
    pub cached: Option<u64>,
}

impl Plan {
    /// Cuts `script.turns[turn]` into pieces. `turn` must be in range.
    pub(crate) fn new(script: &Script, turn: usize, model: String, created: u64) -> Self {
        let spec: &Turn = &script.turns[turn];
        let thinking = spec.thinking.as_ref().map(|t| (split_chars(&t.text, script.chunk_chars), t.signature.clone()));
        let text = spec.text.as_deref().map(|t| split_chars(t, script.chunk_chars));
        let first = script.first_tool_number(turn);
        let tools: Vec<PlannedTool> = spec
            .tool_calls
            .iter()
            .flatten()
            .enumerate()
            .map(|(k, call)| PlannedTool {
                id: call.id.clone(),
                number: first + k,
                name: call.name.clone(),
                input: call.input.clone(),
                pieces: split_bytes(&call.input.to_string(), script.delta_bytes),
            })
            .collect();
        let pieces = thinking.as_ref().map_or(0, |(p, _)| p.len())
            + text.as_ref().map_or(0, Vec::len)
            + tools.iter().map(|t| t.pieces.len()).sum::<usize>();
        let scripted = spec.usage.clone().unwrap_or_default();
        let usage = PlannedUsage {
            input: scripted.input_tokens.unwrap_or(10),
            output: scripted.output_tokens.unwrap_or(if pieces == 0 {
                5
            } else {
                u64::try_from(pieces).unwrap_or(u64::MAX)
            }),
            cached: scripted.cached_tokens,
        };
        Self { turn, model, created, thinking, text, tools, usage, stream_error: spec.stream_error.clone() }
    }
}

/// Cuts `text` every `chars` characters. Empty text gives no pieces.
pub(crate) fn split_chars(text: &str, chars: usize) -> Vec<String> {
    let chars = chars.max(1);
    let mut pieces = Vec::new();
    let mut current = String::new();
    let mut count = 0;
    for c in text.chars() {
        current.push(c);
        count += 1;
        if count == chars {
            pieces.push(std::mem::take(&mut current));
            count = 0;
        }
    }
    if !current.is_empty() {
        pieces.push(current);
    }
    pieces
}

/// Cuts `text` into pieces of at most `bytes` bytes, each ending on a character boundary. A
/// character longer than `bytes` makes a piece of its own. Empty text gives no pieces.
pub(crate) fn split_bytes(text: &str, bytes: usize) -> Vec<String> {
    let bytes = bytes.max(1);
    let mut pieces = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        let mut end = bytes.min(rest.len());
        while !rest.is_char_boundary(end) {
            end -= 1;
        }
        if end == 0 {
            end = rest.chars().next().map_or(rest.len(), char::len_utf8);
        }
        let (piece, tail) = rest.split_at(end);
        pieces.push(piece.to_owned());
        rest = tail;
    }
    pieces
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_is_cut_every_n_characters_not_bytes() {
        assert_eq!(split_chars("héllo wörld", 4), ["héll", "o wö", "rld"]);
        assert!(split_chars("", 4).is_empty());
    }

    #[test]
    fn tool_input_is_cut_on_byte_counts_without_splitting_a_character() {
        let pieces = split_bytes("aé€b", 2);
        assert_eq!(pieces, ["a", "é", "€", "b"]);
        assert_eq!(pieces.concat(), "aé€b");
        assert_eq!(split_bytes("abcdef", 4), ["abcd", "ef"]);
    }

    #[test]
    fn output_tokens_default_to_the_number_of_pieces_or_five() {
        let mut script = Script::new(vec![Turn::text("abcdefghij"), Turn::default()]);
        script.chunk_chars = 4;
        let plan = Plan::new(&script, 0, "m".into(), 0);
        assert_eq!(plan.usage.output, 3);
        assert_eq!(plan.usage.input, 10);
        assert_eq!(Plan::new(&script, 1, "m".into(), 0).usage.output, 5);
    }
}
