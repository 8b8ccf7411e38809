//! A hook's contract in its artifact manifest: the event it is bound to (`binding`), whether
//! the loop waits for it (`execution_mode`) and what it may commit (`commit_policy`), checked
//! against each other so that a hook never declares a commit its event cannot honour.

use super::artifact::ArtifactManifest;
use crate::diagnostics::{Code, Diagnostic, Diagnostics};

/// The lifecycle functions a hook may be bound to, in the order they run.
pub const HOOK_BINDINGS: [&str; 9] = [
    "on-stage",
    "on-session-start",
    "on-task-start",
    "on-inference",
    "on-tool-call",
    "on-shell",
    "on-compaction",
    "on-task-end",
    "on-session-end",
];

/// A hook's `binding`, `execution_mode` and `commit_policy`, checked against each other.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HookContract {
    /// The one event it runs at; `None`: every event but `on-stage`.
    pub binding: Option<&'static str>,
    /// `execution_mode: blocking` (the default): the loop waits for it.
    pub blocking: bool,
    /// `none`, `replace-context`, `write-manifests` or `reopen-task`.
    pub commit_policy: &'static str,
}

impl Default for HookContract {
    fn default() -> Self {
        HookContract { binding: None, blocking: true, commit_policy: "none" }
    }
}

impl HookContract {
    /// Whether the hook runs at `event`.
    pub fn runs_at(&self, event: &str) -> bool {
        match self.binding {
            None => event != "on-stage",
            Some(b) => b == event,
        }
    }
}

/// The one output arm (besides `none`) each event honours, as in Murmur.
pub fn honoured_arm(event: &str) -> Option<&'static str> {
    match event {
        "on-stage" => Some("write-manifests"),
        "on-inference" => Some("artifact"),
        "on-compaction" => Some("replace-context"),
        "on-task-end" => Some("reopen-task"),
        _ => None,
    }
}

/// The commit policy a binding can have honoured (`artifact` has no policy spelling).
fn policy_for(binding: &str) -> Option<&'static str> {
    match honoured_arm(binding) {
        Some("artifact") | None => None,
        other => other,
    }
}

/// A hook manifest's contract, or `E-CAP-012` naming the key that cannot be honoured.
pub(super) fn contract(m: &ArtifactManifest, origin: &str) -> Result<HookContract, Diagnostics> {
    let bad = |key: &str, why: String, fix: &str| -> Diagnostics {
        Diagnostic::new(Code::HookContract, format!("{origin}: {key}"), why, fix).into()
    };
    let binding = match m.binding.as_deref() {
        None => None,
        Some(b) => match HOOK_BINDINGS.iter().find(|k| **k == b) {
            Some(k) => Some(*k),
            None => {
                return Err(bad(
                    "binding",
                    format!("`{b}` is not a lifecycle event"),
                    &format!("use one of {}, or leave binding out to get every event", HOOK_BINDINGS.join(", ")),
                ));
            }
        },
    };
    let blocking = match m.execution_mode.as_deref() {
        None | Some("blocking") => true,
        Some("async") => false,
        Some(other) => {
            return Err(bad(
                "execution_mode",
                format!("`{other}` is not blocking or async"),
                "write blocking or async",
            ));
        }
    };
    let commit_policy = match m.commit_policy.as_deref() {
        None => "none",
        Some(p) => match ["none", "replace-context", "write-manifests", "reopen-task"].into_iter().find(|k| *k == p) {
            Some(k) => k,
            None => {
                return Err(bad(
                    "commit_policy",
                    format!("`{p}` is not a commit policy"),
                    "write none, replace-context, write-manifests or reopen-task",
                ));
            }
        },
    };
    if !blocking && commit_policy != "none" {
        return Err(bad(
            "execution_mode",
            format!("an async hook commits nothing, but this one declares commit_policy `{commit_policy}`"),
            "make it `execution_mode: blocking`, or `commit_policy: none`",
        ));
    }
    if binding == Some("on-stage") && !blocking {
        return Err(bad(
            "execution_mode",
            "an on-stage hook must be blocking".into(),
            "write `execution_mode: blocking`",
        ));
    }
    if let Some(b) = binding
        && commit_policy != "none"
        && policy_for(b) != Some(commit_policy)
    {
        return Err(bad(
            "commit_policy",
            format!(
                "commit_policy `{commit_policy}` can never be honoured at `{b}`, which honours {}",
                policy_for(b).map_or("only none".to_string(), |p| format!("`{p}`"))
            ),
            &format!(
                "write `commit_policy: {}`, or bind the hook to the event that commits `{commit_policy}`",
                policy_for(b).unwrap_or("none")
            ),
        ));
    }
    Ok(HookContract { binding, blocking, commit_policy })
}
