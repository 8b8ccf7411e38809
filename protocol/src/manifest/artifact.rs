//! An artifact folder's own `murmur.yaml`.
//!
//! When `artifacts[].source` is a folder, that folder holds a small manifest naming the
//! component file and, for tools, what the model is told about it. This shape is ours (the
//! contract leaves it open); it is documented in `docs/manifest.md`.

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::types::{ArtifactRuntime, Capabilities};

/// The artifact folder's manifest.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ArtifactManifest {
    /// The artifact's own name (informational; the capsule's name wins).
    pub name: String,
    /// Version, informational.
    #[serde(default)]
    pub version: Option<String>,
    /// Driver or tool; must agree with the capsule's declaration.
    pub runtime: ArtifactRuntime,
    /// The component file, relative to the folder.
    pub module: String,
    /// For tools: what the model is told the tool does.
    #[serde(default)]
    pub description: Option<String>,
    /// For tools: the JSON Schema of the input (`{}` means an empty object schema).
    #[serde(default)]
    pub parameters: Option<Value>,
    /// For drivers: how the gateway attaches the credential.
    #[serde(default)]
    pub upstream_auth: Option<UpstreamAuth>,
    /// Grants the artifact asks for; they narrow the capsule's.
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
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
