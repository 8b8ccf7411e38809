//! YAML text → validated [`Manifest`].
//!
//! Two steps: YAML into a JSON value (syntax errors carry their line), then the value into the
//! typed manifest with the path of every key tracked, so an unknown or mistyped key is named
//! with its full path (`inference.driver.artifcat`).

use serde::de::DeserializeOwned;

use super::artifact::{ArtifactManifest, CheckedArtifact};
use super::types::Manifest;
use super::validate::validate;
use crate::diagnostics::{Code, Diagnostic, Diagnostics};

/// Parse and validate a capsule manifest. `origin` names the file in diagnostics.
/// Warnings are returned beside the manifest; any error refuses it.
pub fn parse(text: &str, origin: &str) -> Result<(Manifest, Vec<Diagnostic>), Diagnostics> {
    let manifest: Manifest = typed(text, origin, "murmur.yaml")?;
    let found = validate(&manifest);
    if found.has_errors() {
        return Err(found);
    }
    Ok((manifest, found.0))
}

/// Parse an artifact folder's own `murmur.yaml` (Murmur's form or this project's): what launch
/// uses from it, and its warnings; any error refuses it.
pub fn parse_artifact_manifest(text: &str, origin: &str) -> Result<(CheckedArtifact, Vec<Diagnostic>), Diagnostics> {
    let own: ArtifactManifest = typed_artifact(text, origin)?;
    super::artifact::check(own, origin)
}

fn typed_artifact(text: &str, origin: &str) -> Result<ArtifactManifest, Diagnostics> {
    typed(text, origin, "an artifact's murmur.yaml").map_err(|d| {
        Diagnostics(
            d.0.into_iter()
                .map(|mut x| {
                    if x.code == Code::ManifestShape || x.code == Code::ManifestUnknownKey {
                        x.code = Code::ArtifactManifest;
                    }
                    x
                })
                .collect(),
        )
    })
}

fn typed<T: DeserializeOwned>(text: &str, origin: &str, what: &str) -> Result<T, Diagnostics> {
    let value: serde_json::Value = serde_saphyr::from_str(text).map_err(|e| {
        Diagnostic::new(
            Code::ManifestSyntax,
            origin,
            format!("{what} is not valid YAML: {e}"),
            "fix the YAML syntax at the position shown",
        )
    })?;
    if !value.is_object() {
        return Err(Diagnostic::new(
            Code::ManifestShape,
            origin,
            format!("{what} must be a mapping of keys at the top level"),
            "start the file with keys such as `name:` and `inference:`",
        )
        .into());
    }
    serde_path_to_error::deserialize::<_, T>(value).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner().to_string();
        let at = if path == "." { origin.to_string() } else { format!("{origin}: {path}") };
        let d = if let Some(rest) = inner.strip_prefix("unknown field ") {
            let key = rest.split(',').next().unwrap_or(rest).trim_matches('`');
            Diagnostic::new(
                Code::ManifestUnknownKey,
                at,
                format!("unknown key `{key}` ({inner})"),
                "remove the key or correct its spelling; unknown keys are never ignored",
            )
        } else {
            Diagnostic::new(
                Code::ManifestShape,
                at,
                inner,
                "give the key the type the contract names (see docs/manifest.md)",
            )
        };
        Diagnostics::from(d)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: &str = "name: hello\ninference:\n  model: m\n  driver: {artifact: d}\nartifacts:\n  - {name: d, runtime: driver, source: d.wasm, gateway: {endpoint: 'http://127.0.0.1:1', keyless: true}}\n";

    #[test]
    fn a_minimal_manifest_gets_every_default() {
        let (m, warnings) = parse(MIN, "murmur.yaml").expect("valid");
        assert!(warnings.is_empty());
        assert_eq!(m.version, "0.0.0");
        assert_eq!(m.inference.max_turns, 10);
        assert_eq!(m.capabilities.limits.memory_bytes, 512 * 1024 * 1024);
        assert_eq!(m.capabilities.limits.deadline_seconds, 600);
        assert_eq!(m.capabilities.filesystem.scope, ".");
        assert!(m.capabilities.network.allow.is_empty());
        assert!(!m.control.enabled());
    }

    #[test]
    fn an_unknown_nested_key_is_named_with_its_path() {
        let text = MIN.replace("model: m", "model: m\n  modle: x");
        let err = parse(&text, "murmur.yaml").expect_err("refused");
        assert_eq!(err.0[0].code, Code::ManifestUnknownKey);
        assert!(err.0[0].at.contains("inference"), "{}", err.0[0]);
        assert!(err.0[0].rule.contains("modle"), "{}", err.0[0]);
    }

    #[test]
    fn a_yaml_syntax_error_is_its_own_code() {
        let err = parse("name: [unclosed\n", "murmur.yaml").expect_err("refused");
        assert_eq!(err.0[0].code, Code::ManifestSyntax);
    }

    #[test]
    fn a_missing_required_key_names_it() {
        let err = parse("name: x\n", "murmur.yaml").expect_err("refused");
        assert_eq!(err.0[0].code, Code::ManifestShape);
        assert!(err.0[0].rule.contains("inference"), "{}", err.0[0]);
    }

    #[test]
    fn later_issue_keys_parse_now() {
        let text = format!(
            "{MIN}control:\n  settings: [inference.driver]\n  secrets: [K]\nlifecycle:\n  task_acceptance: queue\n  queue_depth: 3\n"
        );
        let text = text.replace("model: m", "model: m\n  max_session_tokens: 1000\n  alternates: []");
        let (m, _) = parse(&text, "murmur.yaml").expect("valid");
        assert!(m.control.enabled());
        assert_eq!(m.lifecycle.queue_depth, 3);
        assert_eq!(m.inference.max_session_tokens, Some(1000));
    }

    #[test]
    fn murmurs_artifact_keys_are_warned_by_name_and_runtime_defaults_to_tool() {
        let yaml = "name: hello\ninference:\n  model: m\n  driver: {artifact: d}\nartifacts:\n  - {name: d, runtime: driver, source: d.wasm, gateway: {endpoint: 'http://127.0.0.1:1', keyless: true}}\n  - {name: t, source: t.wasm, local_source: true, prompt_payload: full, on_overflow: drop}\n";
        let (m, warnings) = parse(yaml, "murmur.yaml").expect("accepted");
        assert_eq!(m.artifacts[1].runtime, crate::manifest::ArtifactRuntime::Tool, "Murmur's default");
        let named: Vec<String> =
            warnings.iter().filter(|w| w.code == Code::ManifestKeyNotHonoured).map(|w| w.to_string()).collect();
        assert_eq!(named.len(), 3, "{named:?}");
        for key in ["local_source", "prompt_payload", "on_overflow"] {
            assert!(named.iter().any(|w| w.contains(&format!("artifacts[1].{key}"))), "{key}: {named:?}");
        }
    }
}
