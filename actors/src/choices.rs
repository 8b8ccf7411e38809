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
    /// The driver artifact's name (its gateway is found by it).
    pub driver: String,
    /// The driver artifact's full name, `name@version` when the artifact declares a version:
    /// what the driver sees as `MURMUR_INFERENCE_DRIVER` and what `GET /control` lists.
    pub artifact: String,
    /// The JSON handed to the driver as `MURMUR_INFERENCE_DRIVER_CONFIG` on this choice's
    /// calls: `inference.driver.config` for the primary; an alternate's own `driver.config`,
    /// else the primary's when it runs on the primary's artifact, else none.
    pub config: Option<String>,
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
    let primary_config = m.inference.driver.config.as_ref().map(ToString::to_string);
    let mut pairs = vec![(
        PRIMARY.to_string(),
        m.inference.driver.artifact.clone(),
        m.inference.model.clone(),
        primary_config.clone(),
    )];
    for a in &m.inference.alternates {
        let own = match &a.driver {
            capsule_protocol::manifest::AlternateDriver::Ref(r) => r.config.as_ref().map(ToString::to_string),
            capsule_protocol::manifest::AlternateDriver::Name(_) => None,
        };
        let same_artifact = a.driver.artifact() == m.inference.driver.artifact;
        let config = own.or_else(|| if same_artifact { primary_config.clone() } else { None });
        pairs.push((a.name.clone(), a.driver.artifact().to_string(), a.model.clone(), config));
    }
    let full_name = |artifact: &str| {
        m.artifacts
            .iter()
            .find(|d| d.name == artifact)
            .and_then(|d| d.version.as_ref())
            .map_or_else(|| artifact.to_string(), |v| format!("{artifact}@{v}"))
    };
    let mut warnings = Vec::new();
    let choices = pairs
        .into_iter()
        .map(|(name, driver, model, config)| {
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
                artifact: full_name(&driver),
                driver,
                config,
                model,
                max_tokens: m.inference.max_tokens.unwrap_or(l.max_output),
                context_window: m.context.max_tokens.unwrap_or(l.context_window),
            }
        })
        .collect();
    (choices, warnings)
}
