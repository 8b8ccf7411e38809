//! The manifest sections Murmur projects brought: `inference.compaction` and `observability`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `inference.compaction`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Compaction {
    /// Occupancy (a fraction of the window) at which `on-compaction` runs.
    #[serde(default = "default_threshold")]
    pub threshold: f64,
    /// The model a compaction hook should summarise with (handed to the hook).
    #[serde(default)]
    pub model: Option<String>,
    /// The system prompt a compaction hook should use (handed to the hook).
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// The same, from a file relative to the manifest.
    #[serde(default)]
    pub system_prompt_file: Option<String>,
    /// Murmur's: keep each summary in `out/compaction-summaries.jsonl`.
    #[serde(default)]
    pub dump_summaries: bool,
}

/// The default compaction threshold.
pub const DEFAULT_COMPACTION_THRESHOLD: f64 = 0.98;

fn default_threshold() -> f64 {
    DEFAULT_COMPACTION_THRESHOLD
}

impl Default for Compaction {
    fn default() -> Self {
        Compaction {
            threshold: DEFAULT_COMPACTION_THRESHOLD,
            model: None,
            system_prompt: None,
            system_prompt_file: None,
            dump_summaries: false,
        }
    }
}

/// `observability`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Observability {
    /// An OTLP/HTTP collector (`http[s]://host[:port][/prefix]`); spans go to
    /// `<endpoint>/v1/traces` as protobuf.
    #[serde(default)]
    pub otel_endpoint: Option<String>,
    /// Murmur's evaluation settings (not honoured here).
    #[serde(default)]
    pub eval: Option<Value>,
}
