//! Driver choices (CONTRACT §6, seed 000): `primary` (index 0: `inference.driver.artifact` with
//! `inference.model`), then each `inference.alternates` entry in manifest order. Each choice
//! carries the output cap and context window resolved for its model at launch.

use capsule_protocol::manifest::Manifest;
use capsule_protocol::models::{DEFAULT_LIMITS, known_limits};
use capsule_protocol::{Code, Diagnostic};

/// The primary choice's name.
pub const PRIMARY: &str = "primary";

/// The runtime-provided tool that lets the agent switch choices.
pub const SWITCH_TOOL: &str = "switch-driver";

/// The `switch-driver` tool as the model sees it.
pub fn switch_tool(choices: &[DriverChoice]) -> capsule_protocol::neutral::ToolSpec {
    let names: Vec<&str> = choices.iter().map(|c| c.name.as_str()).collect();
    capsule_protocol::neutral::ToolSpec {
        name: SWITCH_TOOL.into(),
        description: Some(format!(
            "Switch the model/driver you run on, from your next turn. Choices: {}.",
            names.join(", ")
        )),
        parameters: serde_json::json!({"type": "object", "properties": {"driver": {"type": "string", "enum": names}}, "required": ["driver"]}),
    }
}

/// One choice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DriverChoice {
    /// `primary` or the alternate's name.
    pub name: String,
    /// The driver artifact's name.
    pub driver: String,
    /// The model string.
    pub model: String,
    /// Output cap for agent-loop calls under this choice.
    pub max_tokens: u32,
    /// Context window.
    pub context_window: u32,
}

/// Every choice, primary first; and a `W-RUN-009` for each model not in the built-in table
/// (unless the manifest sets both limits).
pub fn resolve(m: &Manifest) -> (Vec<DriverChoice>, Vec<Diagnostic>) {
    let mut pairs = vec![(PRIMARY.to_string(), m.inference.driver.artifact.clone(), m.inference.model.clone())];
    for a in &m.inference.alternates {
        pairs.push((a.name.clone(), a.driver.artifact().to_string(), a.model.clone()));
    }
    let mut warnings = Vec::new();
    let choices = pairs
        .into_iter()
        .map(|(name, driver, model)| {
            let known = known_limits(&model);
            if known.is_none() && (m.inference.max_tokens.is_none() || m.context.max_tokens.is_none()) {
                warnings.push(Diagnostic::new(
                    Code::UnknownModel,
                    if name == PRIMARY { "inference.model".to_string() } else { format!("inference.alternates[{name}].model") },
                    format!("model `{model}` (choice `{name}`) is not in the built-in table; using an output cap of {} and a window of {}", DEFAULT_LIMITS.max_output, DEFAULT_LIMITS.context_window),
                    "set inference.max_tokens and context.max_tokens if these are wrong for this model",
                ));
            }
            let l = known.unwrap_or(DEFAULT_LIMITS);
            DriverChoice {
                name,
                driver,
                model,
                max_tokens: m.inference.max_tokens.unwrap_or(l.max_output),
                context_window: m.context.max_tokens.unwrap_or(l.context_window),
            }
        })
        .collect();
    (choices, warnings)
}
