//! Built-in model limits: the output cap and context window of models this runtime knows, used
//! to resolve each driver choice's limits at launch (CONTRACT §6). A manifest's
//! `inference.max_tokens` / `context.max_tokens` override them for every choice; an unknown
//! model gets [`DEFAULT_LIMITS`] and warning `W-RUN-009`.

/// An output cap and a context window, in tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelLimits {
    /// Largest output per call.
    pub max_output: u32,
    /// Context window.
    pub context_window: u32,
}

/// Limits for a model this runtime does not know.
pub const DEFAULT_LIMITS: ModelLimits = ModelLimits { max_output: 8192, context_window: 128_000 };

/// Known models by prefix (a dated snapshot such as `claude-sonnet-4-5-20250929` matches its
/// family). The longest matching prefix wins.
const KNOWN: &[(&str, ModelLimits)] = &[
    ("claude-opus-4", ModelLimits { max_output: 32_000, context_window: 200_000 }),
    ("claude-opus-4-5", ModelLimits { max_output: 64_000, context_window: 200_000 }),
    ("claude-sonnet-4", ModelLimits { max_output: 64_000, context_window: 200_000 }),
    ("claude-haiku-4-5", ModelLimits { max_output: 64_000, context_window: 200_000 }),
    ("claude-3-7-sonnet", ModelLimits { max_output: 64_000, context_window: 200_000 }),
    ("claude-3-5-haiku", ModelLimits { max_output: 8_192, context_window: 200_000 }),
    ("gpt-4o", ModelLimits { max_output: 16_384, context_window: 128_000 }),
    ("gpt-4.1", ModelLimits { max_output: 32_768, context_window: 1_047_576 }),
    ("gpt-5", ModelLimits { max_output: 128_000, context_window: 400_000 }),
    ("o3", ModelLimits { max_output: 100_000, context_window: 200_000 }),
    ("o4-mini", ModelLimits { max_output: 100_000, context_window: 200_000 }),
];

/// The built-in limits of `model`, if known.
pub fn known_limits(model: &str) -> Option<ModelLimits> {
    KNOWN.iter().filter(|(p, _)| model.starts_with(p)).max_by_key(|(p, _)| p.len()).map(|(_, l)| *l)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dated_snapshots_match_their_family_and_the_longest_prefix_wins() {
        assert_eq!(known_limits("claude-sonnet-4-5-20250929").map(|l| l.max_output), Some(64_000));
        assert_eq!(known_limits("claude-opus-4-5").map(|l| l.max_output), Some(64_000));
        assert_eq!(known_limits("claude-opus-4-1").map(|l| l.max_output), Some(32_000));
        assert_eq!(known_limits("gpt-4o-mini").map(|l| l.context_window), Some(128_000));
        assert_eq!(known_limits("my-local-model"), None);
    }
}
