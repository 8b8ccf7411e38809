//! The per-session control token. It is minted from the OS's random source and written once to
//! a `0600` file for the operator; the session keeps only its SHA-256 (the verification key), in
//! memory. A presented token is checked by hashing it and comparing in constant time. The trace
//! carries `token_id`, the first 16 hex characters of the hash, never the token.

use sha2::{Digest, Sha256};
use std::path::Path;

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

    /// The whole verification key (the token's SHA-256, hex): what a cluster keeps so that a
    /// session moved to another host still accepts the token its clients hold. It cannot be
    /// turned back into the token.
    pub fn to_hex(&self) -> String {
        hex::encode(self.hash)
    }

    /// The key [`to_hex`](Self::to_hex) wrote; `None` for anything but 64 hex characters.
    pub fn from_hex(key: &str) -> Option<TokenKey> {
        let mut hash = [0u8; 32];
        hex::decode_to_slice(key, &mut hash).ok()?;
        Some(TokenKey { hash })
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
        // The kept key verifies the same token, and only a whole key is taken back.
        let kept = TokenKey::from_hex(&key.to_hex()).expect("a key");
        assert!(kept.verify(&token) && !kept.verify("not-the-token"));
        assert!(!key.to_hex().contains(&token));
        assert!(TokenKey::from_hex(&key.to_hex()[..62]).is_none());
        assert!(TokenKey::from_hex("zz").is_none());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(std::fs::metadata(&path).expect("meta").permissions().mode() & 0o777, 0o600);
        }
    }
}
