//! The host config file (`capsule run --config FILE`, `$CAPSULE_CONFIG`, or
//! `~/.config/capsule-runtime/host.yaml` when present): settings that belong to the machine, not
//! to a capsule. Unknown keys are refused like the manifest's.
//!
//! ```yaml
//! credentials:                 # `${NAME}` in a manifest resolves here first, then the environment
//!   ANTHROPIC_API_KEY: sk-ant-…
//! spend:
//!   machine_tokens_per_day: 2000000   # every session on this host, per UTC day
//!   ledger_dir: /var/lib/capsule/spend # default: $XDG_STATE_HOME/capsule-runtime/spend
//! ```

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The host config.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HostConfig {
    /// Credentials by name.
    #[serde(default)]
    pub credentials: BTreeMap<String, String>,
    /// Host-wide spend.
    #[serde(default)]
    pub spend: SpendConfig,
}

/// `spend`.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct SpendConfig {
    /// Ceiling for every session on the host, per UTC day.
    #[serde(default)]
    pub machine_tokens_per_day: Option<u64>,
    /// Where the per-day ledger files live.
    #[serde(default)]
    pub ledger_dir: Option<String>,
}

impl std::fmt::Display for HostConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "host config ({} credentials, machine ceiling {:?})",
            self.credentials.len(),
            self.spend.machine_tokens_per_day
        )
    }
}

/// Parse a host config. `origin` names the file in diagnostics.
pub fn parse(text: &str, origin: &str) -> Result<HostConfig, crate::Diagnostics> {
    let value: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| {
        crate::Diagnostic::new(
            crate::Code::ManifestSyntax,
            origin,
            format!("the host config is not valid YAML: {e}"),
            "fix the YAML syntax at the position shown",
        )
    })?;
    let value = if value.is_null() { serde_json::json!({}) } else { value };
    let config: HostConfig = serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        crate::Diagnostic::new(
            crate::Code::ManifestUnknownKey,
            format!("{origin}: {path}"),
            e.into_inner().to_string(),
            "use only `credentials` and `spend` (machine_tokens_per_day, ledger_dir)",
        )
    })?;
    if config.spend.machine_tokens_per_day == Some(0) {
        return Err(crate::Diagnostic::new(
            crate::Code::ManifestInvalid,
            format!("{origin}: spend.machine_tokens_per_day"),
            "the ceiling is 0",
            "set a positive number of tokens, or remove the key",
        )
        .into());
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_host_config_parses_credentials_and_the_machine_ceiling_and_refuses_unknown_keys() {
        let c = parse("credentials: {K: v}\nspend: {machine_tokens_per_day: 5}\n", "host.yaml").expect("valid");
        assert_eq!(c.credentials["K"], "v");
        assert_eq!(c.spend.machine_tokens_per_day, Some(5));
        assert!(parse("spend: {machine_tokens: 5}\n", "host.yaml").is_err());
        assert!(parse("", "host.yaml").expect("empty is fine").credentials.is_empty());
    }
}
