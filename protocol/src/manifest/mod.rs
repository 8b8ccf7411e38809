//! The capsule manifest (`murmur.yaml`, CONTRACT §1): its types, parsing and validation.
//!
//! [`parse`] turns YAML text into a [`Manifest`] that has passed every load-time rule, or into
//! [`Diagnostics`](crate::Diagnostics) naming each problem. Unknown keys are refused with their
//! full path. Defaults are filled here, so later layers never see "unset means unlimited".
//! Keys that later stages enforce (`alternates`, `control`, `max_session_tokens`,
//! `lifecycle`) are parsed and shape-checked here.

mod artifact;
mod grant_rules;
mod hook_contract;
mod parse;
mod sections;
mod types;
mod validate;

pub use artifact::{
    ArtifactKind, ArtifactManifest, CheckedArtifact, HOOK_BINDINGS, HookContract, UpstreamAuth, honoured_arm,
};
pub use grant_rules::{artifact_capability_rules, endpoint_override_rules, scope_parts};
pub use parse::{parse, parse_artifact_manifest};
pub use sections::{Compaction, DEFAULT_COMPACTION_THRESHOLD, Observability};
pub use types::*;
pub use validate::{AllowRule, KNOWN_SETTINGS, interpolated_name, is_credential_shaped, is_loopback_host};
