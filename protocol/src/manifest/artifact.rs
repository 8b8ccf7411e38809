//! An artifact folder's own `murmur.yaml`, as Murmur writes it, and this project's older form.
//!
//! Murmur's keys: `name`, `version`, `runtime` (`tool|driver|hook|skill`), `implementation`,
//! `execution`, `description`, `input_schema` (alias `input`; a mapping or a JSON string),
//! `requires_files` (the component is the `.wasm` listed there), `tags`, `output_schema`,
//! per-artifact `capabilities`, and for hooks `binding`, `execution_mode`, `commit_policy`.
//! This project's own form adds `module` (the component file), `parameters` (the schema) and
//! `upstream_auth`. Both are accepted in one file.
//!
//! Rules (docs/manifest.md, *Artifact folders*): a key this runtime does not know, or knows but
//! cannot honour, is a `W-CAP-003` warning naming it: never refused for being unknown, never
//! silently dropped. What cannot run here (a native implementation, a hook or skill for now)
//! is `E-CAP-008`. A shape error is `E-CAP-006`.

use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::collections::BTreeMap;

use super::hook_contract::contract;
pub use super::hook_contract::{HOOK_BINDINGS, HookContract, honoured_arm};
use super::types::{ArtifactRuntime, Capabilities};
use crate::diagnostics::{Code, Diagnostic, Diagnostics};

/// What an artifact is, as its own manifest says.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactKind {
    /// A tool the model can call.
    Tool,
    /// An inference driver.
    Driver,
    /// A lifecycle hook.
    Hook,
    /// A skill (a document the model reads).
    Skill,
}

impl ArtifactKind {
    /// The capsule-side runtime, for the kinds this runtime runs.
    pub fn runtime(self) -> Option<ArtifactRuntime> {
        match self {
            ArtifactKind::Tool => Some(ArtifactRuntime::Tool),
            ArtifactKind::Driver => Some(ArtifactRuntime::Driver),
            ArtifactKind::Hook => Some(ArtifactRuntime::Hook),
            ArtifactKind::Skill => None,
        }
    }
}

/// The artifact folder's manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct ArtifactManifest {
    /// The artifact's own name (informational; the capsule's name wins).
    pub name: String,
    /// Version, informational.
    #[serde(default)]
    pub version: Option<String>,
    /// What it is; a tool or driver must agree with the capsule's declaration.
    pub runtime: ArtifactKind,
    /// Murmur: `wasm` (default) or `native`.
    #[serde(default)]
    pub implementation: Option<String>,
    /// Murmur: `wasm`, `native` or `static` (packaging).
    #[serde(default)]
    pub execution: Option<String>,
    /// This project's form: the component file, relative to the folder.
    #[serde(default)]
    pub module: Option<String>,
    /// Murmur: the files the artifact is made of besides its manifest; the component is the
    /// `.wasm` among them.
    #[serde(default)]
    pub requires_files: Vec<String>,
    /// For tools: what the model is told the tool does.
    #[serde(default)]
    pub description: Option<String>,
    /// For tools: the JSON Schema of the input (a mapping, or a string holding JSON).
    #[serde(default)]
    pub input_schema: Option<Value>,
    /// Murmur's alias of `input_schema` (read when `input_schema` is absent).
    #[serde(default)]
    pub input: Option<Value>,
    /// This project's name for the input schema (read when neither of the above is given).
    #[serde(default)]
    pub parameters: Option<Value>,
    /// Murmur: informational.
    #[serde(default)]
    pub output_schema: Option<Value>,
    /// Murmur: informational.
    #[serde(default)]
    pub tags: Vec<String>,
    /// Hooks: the lifecycle event.
    #[serde(default)]
    pub binding: Option<String>,
    /// Hooks: `blocking` or `async`.
    #[serde(default)]
    pub execution_mode: Option<String>,
    /// Hooks: what the hook may change.
    #[serde(default)]
    pub commit_policy: Option<String>,
    /// For drivers: how the gateway attaches the credential.
    #[serde(default)]
    pub upstream_auth: Option<UpstreamAuth>,
    /// Grants the artifact asks for, as written.
    #[serde(default)]
    pub capabilities: Option<Value>,
    /// Keys this runtime does not know.
    #[serde(flatten)]
    pub other: BTreeMap<String, Value>,
}

/// How the gateway writes the credential into an upstream request.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct UpstreamAuth {
    /// Header name, e.g. `x-api-key`.
    pub header: String,
    /// Header value with `{key}` where the credential goes, e.g. `Bearer {key}`.
    pub value: String,
}

/// An artifact manifest checked: what launch uses from it.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedArtifact {
    /// The manifest as written.
    pub manifest: ArtifactManifest,
    /// The tool or driver it is.
    pub runtime: ArtifactRuntime,
    /// The description, trimmed; `None` when empty.
    pub description: Option<String>,
    /// The input schema (`input_schema`, else `input`, else `parameters`), parsed.
    pub schema: Option<Value>,
    /// Grants in this runtime's own shape, which narrow the capsule's; `None` when the
    /// manifest has none, or has them in a shape this runtime does not honour (warned).
    pub grants: Option<Capabilities>,
    /// For hooks: when it runs, whether the loop waits, and what it may commit.
    pub hook: Option<HookContract>,
}

fn warn(origin: &str, key: &str, why: String, fix: &str) -> Diagnostic {
    Diagnostic::new(Code::ArtifactKeyIgnored, format!("{origin}: {key}"), why, fix)
}

fn refuse(origin: &str, key: &str, why: String, fix: &str) -> Diagnostics {
    Diagnostic::new(Code::ArtifactUnsupported, format!("{origin}: {key}"), why, fix).into()
}

/// The input schema from a mapping or a JSON string; a warning when it is neither.
fn schema(origin: &str, key: &str, v: &Value, warnings: &mut Vec<Diagnostic>) -> Option<Value> {
    let parsed = match v {
        Value::Object(_) => Some(v.clone()),
        Value::String(s) => serde_json::from_str::<Value>(s).ok().filter(Value::is_object),
        _ => None,
    };
    if parsed.is_none() {
        warnings.push(warn(
            origin,
            key,
            format!(
                "`{key}` is neither a mapping nor a string holding a JSON object, so the model is offered any object"
            ),
            "write the JSON Schema as a YAML mapping (type: object, properties: …)",
        ));
    }
    parsed
}

/// Check a parsed manifest: the refusals, the warnings, and what launch uses.
pub fn check(m: ArtifactManifest, origin: &str) -> Result<(CheckedArtifact, Vec<Diagnostic>), Diagnostics> {
    let mut warnings = Vec::new();
    let Some(runtime) = m.runtime.runtime() else {
        return Err(refuse(
            origin,
            "runtime",
            format!("`runtime: {:?}` artifacts do not run in this runtime yet", m.runtime).to_lowercase(),
            "use a tool or driver artifact, or leave this artifact out of the capsule",
        ));
    };
    if let Some(i) = &m.implementation {
        match i.as_str() {
            "wasm" => {}
            "native" => {
                return Err(refuse(
                    origin,
                    "implementation",
                    "a native artifact is a host binary; this runtime runs only WebAssembly components".into(),
                    "use the artifact's wasm build",
                ));
            }
            other => warnings.push(warn(
                origin,
                "implementation",
                format!("`{other}` is not `wasm` or `native`; it is run as wasm, as Murmur does"),
                "write `implementation: wasm`",
            )),
        }
    }
    if let Some(e) = &m.execution {
        match e.to_ascii_lowercase().as_str() {
            "wasm" => {}
            "native" | "static" => {
                return Err(refuse(
                    origin,
                    "execution",
                    format!("`execution: {e}` is not a WebAssembly component; this runtime runs only those"),
                    "use the artifact's wasm build",
                ));
            }
            _ => {
                return Err(Diagnostic::new(
                    Code::ArtifactManifest,
                    format!("{origin}: execution"),
                    format!("`{e}` is not wasm, native or static"),
                    "write `execution: wasm`",
                )
                .into());
            }
        }
    }
    for (i, f) in m.requires_files.iter().enumerate() {
        let p = std::path::Path::new(f);
        let unsafe_path = f.is_empty()
            || p.is_absolute()
            || p.components().any(|c| !matches!(c, std::path::Component::Normal(_) | std::path::Component::CurDir));
        if unsafe_path {
            return Err(Diagnostic::new(
                Code::ArtifactManifest,
                format!("{origin}: requires_files[{i}]"),
                format!("`{f}` is not a plain relative path inside the artifact folder"),
                "list files by their path inside the folder, without `..` or a leading `/`",
            )
            .into());
        }
    }
    let hook = if runtime == ArtifactRuntime::Hook { Some(contract(&m, origin)?) } else { None };
    let hook_keys: Vec<&str> = [
        ("binding", m.binding.is_some()),
        ("execution_mode", m.execution_mode.is_some()),
        ("commit_policy", m.commit_policy.is_some()),
    ]
    .into_iter()
    .filter_map(|(k, set)| set.then_some(k))
    .collect();
    if hook.is_none() && !hook_keys.is_empty() {
        warnings.push(warn(
            origin,
            &hook_keys.join(", "),
            format!("{} apply to hooks only; this artifact is a {runtime:?}", hook_keys.join(", ")).to_lowercase(),
            "remove them, or declare the artifact as a hook",
        ));
    }
    let (key, raw) = match (&m.input_schema, &m.input, &m.parameters) {
        (Some(v), _, _) => ("input_schema", Some(v)),
        (None, Some(v), _) => ("input", Some(v)),
        (None, None, Some(v)) => ("parameters", Some(v)),
        _ => ("input_schema", None),
    };
    let schema = raw.and_then(|v| schema(origin, key, v, &mut warnings));
    let grants = match &m.capabilities {
        None => None,
        Some(v) => match serde_json::from_value::<Capabilities>(v.clone()) {
            Ok(c) => {
                let found = super::grant_rules::artifact_capability_rules(&c, &format!("{origin}: capabilities"));
                if found.has_errors() {
                    return Err(found);
                }
                warnings.extend(found.0);
                Some(c)
            }
            Err(e) => {
                warnings.push(warn(
                    origin,
                    "capabilities",
                    format!("these capabilities are not in this runtime's shape ({e}), so they are not honoured: the artifact gets the capsule's grants, as in Murmur"),
                    "narrow the artifact's grants in the capsule manifest (artifacts[].capabilities)",
                ));
                None
            }
        },
    };
    if !m.other.is_empty() {
        let keys: Vec<&str> = m.other.keys().map(String::as_str).collect();
        warnings.push(warn(
            origin,
            &keys.join(", "),
            format!("unknown key(s) {} are not used by this runtime", keys.join(", ")),
            "remove them, or check their spelling against docs/manifest.md",
        ));
    }
    let description = m.description.as_deref().map(str::trim).filter(|d| !d.is_empty()).map(String::from);
    Ok((CheckedArtifact { manifest: m, runtime, description, schema, grants, hook }, warnings))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(yaml: &str) -> Result<(CheckedArtifact, Vec<Diagnostic>), Diagnostics> {
        super::super::parse::parse_artifact_manifest(yaml, "a/murmur.yaml")
    }

    #[test]
    fn a_murmur_tool_manifest_is_accepted_with_its_schema_and_description() {
        let yaml = "name: web-fetch\nversion: \"0.2.0\"\nruntime: tool\nimplementation: wasm\ndescription: \"  Fetch a URL.  \"\ninput_schema:\n  type: object\n  properties: {url: {type: string}}\n  required: [url]\nrequires_files: [web_fetch.wasm]\ntags: [network]\n";
        let (a, warnings) = parsed(yaml).expect("accepted");
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(a.runtime, ArtifactRuntime::Tool);
        assert_eq!(a.description.as_deref(), Some("Fetch a URL."));
        assert_eq!(a.schema.as_ref().and_then(|s| s["required"][0].as_str()), Some("url"));
        assert_eq!(a.manifest.requires_files, ["web_fetch.wasm"]);
    }

    #[test]
    fn input_as_a_json_string_is_the_schema_and_a_broken_one_is_a_warning_not_a_refusal() {
        let (a, w) = parsed(
            "name: t\nruntime: tool\ninput: '{\"type\":\"object\",\"properties\":{\"q\":{\"type\":\"string\"}}}'\n",
        )
        .expect("accepted");
        assert!(w.is_empty());
        assert_eq!(a.schema.as_ref().map(|s| s["properties"]["q"]["type"].clone()), Some(Value::from("string")));
        let (a, w) = parsed("name: t\nruntime: tool\ninput_schema: '{not json'\n").expect("accepted");
        assert_eq!(a.schema, None);
        assert_eq!(w.iter().map(|d| d.code).collect::<Vec<_>>(), vec![Code::ArtifactKeyIgnored], "{w:?}");
    }

    #[test]
    fn unknown_keys_hook_keys_on_a_tool_and_murmur_shaped_capabilities_are_each_warned_by_name() {
        let yaml = "name: t\nruntime: tool\nmystery: 1\nbinding: on-task-end\ncapabilities:\n  filesystem:\n    allow: [\".\"]\n";
        let (a, w) = parsed(yaml).expect("accepted");
        assert_eq!(a.grants, None, "Murmur's capabilities are not honoured as grants");
        let text: Vec<String> = w.iter().map(|d| d.to_string()).collect();
        assert_eq!(w.len(), 3, "{text:?}");
        assert!(w.iter().all(|d| d.code == Code::ArtifactKeyIgnored));
        for key in ["mystery", "binding", "capabilities"] {
            assert!(text.iter().any(|t| t.contains(key)), "{key} named: {text:?}");
        }
    }

    #[test]
    fn a_hook_contract_is_checked_binding_against_commit_policy_and_mode() {
        let (a, w) = parsed("name: c\nruntime: hook\nbinding: on-compaction\ncommit_policy: replace-context\n")
            .expect("accepted");
        assert!(w.is_empty(), "{w:?}");
        let c = a.hook.expect("a hook contract");
        assert_eq!((c.binding, c.blocking, c.commit_policy), (Some("on-compaction"), true, "replace-context"));
        assert!(c.runs_at("on-compaction") && !c.runs_at("on-inference"));
        let all = parsed("name: c\nruntime: hook\ncommit_policy: reopen-task\n").expect("no binding: any policy");
        let all = all.0.hook.expect("contract");
        assert!(all.runs_at("on-inference") && !all.runs_at("on-stage"), "no binding: every event but on-stage");
        for (yaml, key) in [
            ("binding: on-inference\ncommit_policy: replace-context\n", "commit_policy"),
            ("binding: on-task-end\ncommit_policy: replace-context\n", "commit_policy"),
            ("binding: on-compaction\nexecution_mode: async\ncommit_policy: replace-context\n", "execution_mode"),
            ("binding: on-stage\nexecution_mode: async\n", "execution_mode"),
            ("binding: on-lunch\n", "binding"),
            ("execution_mode: eventually\n", "execution_mode"),
            ("commit_policy: everything\n", "commit_policy"),
        ] {
            let e = parsed(&format!("name: h\nruntime: hook\n{yaml}")).expect_err(yaml);
            assert_eq!(e.0[0].code, Code::HookContract, "{yaml}");
            assert!(e.0[0].to_string().contains(key), "{yaml}: {e}");
        }
        assert_eq!(honoured_arm("on-inference"), Some("artifact"));
        assert_eq!(honoured_arm("on-tool-call"), None);
    }

    #[test]
    fn what_cannot_run_here_is_refused_with_its_own_code() {
        for (yaml, key) in [
            ("name: s\nruntime: skill\n", "runtime"),
            ("name: nat\nruntime: tool\nimplementation: native\n", "implementation"),
            ("name: nat\nruntime: tool\nexecution: static\n", "execution"),
        ] {
            let e = parsed(yaml).expect_err("refused");
            assert_eq!(e.0[0].code, Code::ArtifactUnsupported, "{yaml}");
            assert!(e.0[0].to_string().contains(key), "{e}");
        }
        let e = parsed("name: t\nruntime: tool\nrequires_files: [../../etc/passwd]\n").expect_err("refused");
        assert_eq!(e.0[0].code, Code::ArtifactManifest);
        let e = parsed("name: t\nruntime: toolz\n").expect_err("refused");
        assert_eq!(e.0[0].code, Code::ArtifactManifest);
    }

    #[test]
    fn this_projects_own_form_still_narrows_grants() {
        let yaml = "name: files\nruntime: tool\nmodule: f.wasm\nparameters: {type: object}\ncapabilities:\n  filesystem: {scope: notes}\n";
        let (a, w) = parsed(yaml).expect("accepted");
        assert!(w.is_empty(), "{w:?}");
        assert_eq!(a.grants.map(|g| g.filesystem.scope), Some("notes".to_string()));
        assert_eq!(a.schema, Some(serde_json::json!({"type": "object"})));
    }
}
