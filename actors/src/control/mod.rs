//! The control surface (CONTRACT §7): an operator changes a running session's settings and
//! secrets over `/control` on the door. Where each part lives:
//!
//! - this file: the plain types every part shares, and [`ControlError`], the one refusal type
//!   (it knows its status, reason word and headers);
//! - `token.rs`: the per-session token and its verification key;
//! - `http.rs`: the HTTP handler, in three steps: extract (token, path, method, origin, body,
//!   content type), route to an action, act;
//! - `session.rs`: the session's operations the handler acts through (settings go to the agent
//!   loop, secrets to the credentials actor);
//! - the loop's own settings (the choice switch, the output cap) are in
//!   `agent_loop/settings.rs`, and the decision on secrets and the choice in use in
//!   `credentials.rs`.

mod http;
mod session;
mod token;

pub(crate) use http::handle;
pub use token::TokenKey;

use serde::Serialize;

/// Longest setting body, in bytes.
pub const MAX_SETTING_BODY: usize = 1024;
/// Longest secret body, in bytes.
pub const MAX_SECRET_BODY: usize = 8192;

/// Who asked for a change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Principal {
    /// An operator on `/control` with the token.
    Operator,
    /// The agent itself, through the `switch-driver` tool.
    Agent,
}

/// Why a control request was refused. Each refusal knows its HTTP status, its reason word
/// and the headers it needs; its `Display` is the one sentence a client reads. The body is
/// `{"error": "<reason>: <sentence>"}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ControlError {
    /// The capsule declares no control surface.
    #[error("this capsule declares no control surface")]
    NoSurface,
    /// No token, or not this session's.
    #[error(
        "send `Authorization: Bearer <token>` with the session's control token (its file is named in the ready line)"
    )]
    Unauthorized,
    /// Not a control path.
    #[error("`{path}` is not a control path; use /control, /control/settings/<name> or /control/secrets/<name>")]
    UnknownPath {
        /// The path asked for.
        path: String,
    },
    /// A setting the manifest does not declare.
    #[error("`{name}` is not declared under control.settings; declared: {}", declared.join(", "))]
    UndeclaredSetting {
        /// The name asked for.
        name: String,
        /// The declared settings.
        declared: Vec<String>,
    },
    /// A secret the manifest does not declare.
    #[error("`{name}` is not declared under control.secrets; declared: {}", declared.join(", "))]
    UndeclaredSecret {
        /// The name asked for.
        name: String,
        /// The declared secrets.
        declared: Vec<String>,
    },
    /// The method is not one this path takes.
    #[error("{method} is not allowed here; allowed: {allowed}")]
    MethodNotAllowed {
        /// The method used.
        method: String,
        /// What the path takes, as the `Allow` header lists it.
        allowed: &'static str,
    },
    /// A secret write from another machine.
    #[error("secrets are written only from loopback; run the request on the capsule's host")]
    NotLoopback,
    /// The body is over the limit.
    #[error("the body is over {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// A setting sent as something other than JSON.
    #[error("send the setting as `Content-Type: application/json` with {{\"value\": …}}")]
    UnsupportedMediaType,
    /// No body, or no `value`.
    #[error("{what}")]
    MissingBody {
        /// What to send.
        what: &'static str,
    },
    /// A value the setting or secret does not take.
    #[error("{why}")]
    InvalidValue {
        /// What it takes.
        why: String,
    },
    /// `inference.driver` set to a name that is not a choice.
    #[error("`{name}` is not a driver choice of this capsule; choices: {choices}")]
    UndeclaredDriver {
        /// The name asked for.
        name: String,
        /// The choices.
        choices: String,
    },
    /// The choice's credential cannot produce a value now.
    #[error("the choice cannot be selected: {why}")]
    CredentialUnresolvable {
        /// Why.
        why: String,
    },
    /// The secret keys the choice in use.
    #[error("secret `{name}` keys the driver choice in use; switch to another choice before forgetting it")]
    InUse {
        /// The secret.
        name: String,
    },
    /// The actor that decides did not answer.
    #[error("{0}; try again")]
    Unavailable(#[from] crate::peer::PeerError),
}

impl ControlError {
    /// The HTTP status.
    pub fn status(&self) -> u16 {
        match self {
            ControlError::NoSurface
            | ControlError::UnknownPath { .. }
            | ControlError::UndeclaredSetting { .. }
            | ControlError::UndeclaredSecret { .. } => 404,
            ControlError::Unauthorized => 401,
            ControlError::MethodNotAllowed { .. } => 405,
            ControlError::NotLoopback => 403,
            ControlError::TooLarge { .. } => 413,
            ControlError::UnsupportedMediaType => 415,
            ControlError::MissingBody { .. }
            | ControlError::InvalidValue { .. }
            | ControlError::UndeclaredDriver { .. } => 422,
            ControlError::CredentialUnresolvable { .. } | ControlError::InUse { .. } => 409,
            ControlError::Unavailable(_) => 503,
        }
    }

    /// The reason word.
    pub fn reason(&self) -> &'static str {
        match self {
            ControlError::NoSurface | ControlError::UnknownPath { .. } => "unknown_path",
            ControlError::Unauthorized => "unauthorized",
            ControlError::UndeclaredSetting { .. } => "undeclared_setting",
            ControlError::UndeclaredSecret { .. } => "undeclared_secret",
            ControlError::MethodNotAllowed { .. } => "method_not_allowed",
            ControlError::NotLoopback => "not_loopback",
            ControlError::TooLarge { .. } => "too_large",
            ControlError::UnsupportedMediaType => "unsupported_media_type",
            ControlError::MissingBody { .. } => "missing_body",
            ControlError::InvalidValue { .. } => "invalid_value",
            ControlError::UndeclaredDriver { .. } => "undeclared_driver",
            ControlError::CredentialUnresolvable { .. } => "credential_unresolvable",
            ControlError::InUse { .. } => "in_use",
            ControlError::Unavailable(_) => "unavailable",
        }
    }

    /// The headers the answer carries besides its body: `WWW-Authenticate` on a 401, `Allow`
    /// on a 405.
    pub fn headers(&self) -> Vec<(&'static str, &'static str)> {
        match self {
            ControlError::Unauthorized => vec![("www-authenticate", "Bearer")],
            ControlError::MethodNotAllowed { allowed, .. } => vec![("allow", allowed)],
            _ => Vec::new(),
        }
    }

    /// The fields of its `control_refused` trace line (never a secret value: no variant holds
    /// one).
    pub fn trace_fields(&self) -> serde_json::Value {
        serde_json::json!({"status": self.status(), "reason": self.reason(), "error": self.to_string()})
    }
}

/// One entry of `GET /control`'s `choices`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ChoiceView {
    /// Choice name.
    pub name: String,
    /// Driver artifact.
    pub driver: String,
    /// Model.
    pub model: String,
    /// Whether its credential can produce a value now.
    pub available: bool,
}

/// A setting's answer to `PUT /control/settings/<name>`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SettingChange {
    /// Setting name.
    pub name: String,
    /// Value before.
    pub previous: serde_json::Value,
    /// Value now.
    pub value: serde_json::Value,
    /// Always `next_inference_call`.
    pub applies_from: &'static str,
}

/// Whether a secret value is acceptable: visible ASCII and space only, not empty.
pub fn valid_secret(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| (0x20..=0x7e).contains(&b))
}
