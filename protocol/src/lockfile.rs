//! `murmur.lock`, beside a capsule's `murmur.yaml`: the installed package each artifact without
//! a `source` resolved to, as Murmur writes it. Plain data: parse and render only.
//!
//! ```yaml
//! lock_version: 1
//! artifacts:
//!   - name: web-fetch
//!     resolved_version: 0.2.0
//!     sha256: {wasm: 3f…}      # SHA-256 of the whole .mur.zip (Murmur's field name)
//! ```

use serde::{Deserialize, Serialize};

/// The lock file name.
pub const LOCK_FILE: &str = "murmur.lock";

/// The whole file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Lock {
    /// Always 1.
    pub lock_version: u32,
    /// One entry per artifact without a `source`.
    #[serde(default)]
    pub artifacts: Vec<LockEntry>,
}

/// One locked artifact.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockEntry {
    /// The artifact's name.
    pub name: String,
    /// The version it resolved to.
    pub resolved_version: String,
    /// Hashes.
    pub sha256: LockHashes,
}

/// `sha256` of an entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LockHashes {
    /// Lowercase hex SHA-256 of the package file (`<name>-<version>.mur.zip`), despite the name.
    pub wasm: String,
}

/// Why a lock file was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// Not YAML of the right shape.
    #[error("murmur.lock is not a lock file: {0}")]
    Shape(String),
    /// Another `lock_version`.
    #[error("murmur.lock has lock_version {0}; only 1 is known")]
    Version(u32),
    /// An empty name, version or hash.
    #[error("murmur.lock entry {0} has an empty name, resolved_version or sha256.wasm")]
    Empty(usize),
}

impl Lock {
    /// Parse and check a lock file's text.
    pub fn parse(text: &str) -> Result<Lock, LockError> {
        let lock: Lock = serde_saphyr::from_str(text).map_err(|e| LockError::Shape(e.to_string()))?;
        if lock.lock_version != 1 {
            return Err(LockError::Version(lock.lock_version));
        }
        if let Some(i) = lock
            .artifacts
            .iter()
            .position(|a| a.name.is_empty() || a.resolved_version.is_empty() || a.sha256.wasm.is_empty())
        {
            return Err(LockError::Empty(i));
        }
        Ok(lock)
    }

    /// The entry of `name`.
    pub fn entry(&self, name: &str) -> Option<&LockEntry> {
        self.artifacts.iter().find(|a| a.name == name)
    }

    /// The file's text.
    pub fn render(&self) -> String {
        let mut out = format!("lock_version: {}\nartifacts:\n", self.lock_version);
        if self.artifacts.is_empty() {
            return format!("lock_version: {}\nartifacts: []\n", self.lock_version);
        }
        for a in &self.artifacts {
            out.push_str(&format!(
                "  - name: {}\n    resolved_version: {}\n    sha256:\n      wasm: {}\n",
                quote(&a.name),
                quote(&a.resolved_version),
                quote(&a.sha256.wasm)
            ));
        }
        out
    }
}

/// A YAML scalar that reads back as the same string.
fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rendered_lock_parses_back_to_itself_and_bad_ones_are_named() {
        let lock = Lock {
            lock_version: 1,
            artifacts: vec![LockEntry {
                name: "web-fetch".into(),
                resolved_version: "0.10".into(),
                sha256: LockHashes { wasm: "ab".repeat(32) },
            }],
        };
        assert_eq!(Lock::parse(&lock.render()), Ok(lock.clone()), "{}", lock.render());
        assert_eq!(Lock::parse("lock_version: 2\nartifacts: []\n"), Err(LockError::Version(2)));
        let empty = "lock_version: 1\nartifacts:\n  - {name: a, resolved_version: '', sha256: {wasm: x}}\n";
        assert_eq!(Lock::parse(empty), Err(LockError::Empty(0)));
        assert!(matches!(Lock::parse("nope"), Err(LockError::Shape(_))));
    }
}
