//! The control surface's plain types and its token (CONTRACT §7).
//!
//! The token is minted per session from the OS's random source and written once to a `0600`
//! file for the operator. The session keeps only its SHA-256 (the verification key), in
//! memory; a presented token is checked by hashing it and comparing in constant time. The
//! trace carries `token_id`, the first 16 hex characters of the hash, never the token.

use serde::Serialize;
use sha2::{Digest, Sha256};
use std::path::Path;

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

/// A refusal: HTTP status, the reason word and one sentence.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ControlRefusal {
    /// HTTP status.
    #[serde(skip)]
    pub status: u16,
    /// The reason word (`undeclared_driver`, `credential_unresolvable`, `in_use`, ...).
    pub reason: &'static str,
    /// One sentence saying what was wrong and what to do.
    pub error: String,
}

impl ControlRefusal {
    /// Build a refusal.
    pub fn new(status: u16, reason: &'static str, error: impl Into<String>) -> Self {
        ControlRefusal { status, reason, error: error.into() }
    }
}

impl std::fmt::Display for ControlRefusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} ({})", self.error, self.reason)
    }
}

impl std::error::Error for ControlRefusal {}

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

/// The per-session control token's verification key.
#[derive(Clone)]
pub struct TokenKey {
    hash: [u8; 32],
}

impl std::fmt::Debug for TokenKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "TokenKey({})", self.id())
    }
}

impl TokenKey {
    /// Mint a token, write it to `path` with mode 0600, and keep only its hash.
    pub fn mint(path: &Path) -> std::io::Result<TokenKey> {
        let mut raw = [0u8; 32];
        getrandom::fill(&mut raw).map_err(|e| std::io::Error::other(e.to_string()))?;
        let token = hex::encode(raw);
        write_private(path, token.as_bytes())?;
        Ok(TokenKey { hash: Sha256::digest(token.as_bytes()).into() })
    }

    /// `token_id`: the first 16 hex of the token's SHA-256.
    pub fn id(&self) -> String {
        hex::encode(&self.hash[..8])
    }

    /// Whether `presented` is the token (constant time in the hash comparison).
    pub fn verify(&self, presented: &str) -> bool {
        let h: [u8; 32] = Sha256::digest(presented.trim().as_bytes()).into();
        h.iter().zip(self.hash.iter()).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
    }
}

fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f =
        capsule_runtime::Beneath::file_at(path, capsule_runtime::FileMode::Truncate).map_err(std::io::Error::other)?;
    f.write_all(bytes)
}

/// Whether a secret value is acceptable: visible ASCII and space only, not empty.
pub fn valid_secret(value: &str) -> bool {
    !value.is_empty() && value.bytes().all(|b| (0x20..=0x7e).contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_file_is_private_and_only_the_hash_is_kept() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("control.token");
        let key = TokenKey::mint(&path).expect("mint");
        let token = std::fs::read_to_string(&path).expect("token");
        assert!(key.verify(&token));
        assert!(!key.verify("not-the-token"));
        assert_eq!(key.id().len(), 16);
        assert!(!format!("{key:?}").contains(&token));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        }
    }
}
