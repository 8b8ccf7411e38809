//! A session's door and control tokens: minted at each start into `0600` files in the session
//! folder (the session keeps only their verification keys), or, in a session claimed from a
//! lost host, taken from the cluster's book so the tokens its clients hold stay valid.

use std::path::{Path, PathBuf};

use crate::control::TokenKey;
use crate::error::LaunchError;

/// The door's authentication: the token's verification key (the token itself is only in its
/// `0600` file, shown once to the operator, never traced or logged).
#[derive(Debug, Clone)]
pub struct DoorAuth {
    /// Verifies presented tokens in constant time.
    pub key: TokenKey,
    /// `<session>/door.token`; `None` in a session claimed from a lost host, whose token was
    /// minted there (its clients keep using it).
    pub token_file: Option<PathBuf>,
}

/// The verification keys a session claimed from a lost host keeps (from the cluster's session
/// book), so the door and control tokens its clients hold stay valid across the move.
#[derive(Debug, Clone, Default)]
pub struct KeptKeys {
    /// The door token's.
    pub door: Option<TokenKey>,
    /// The control token's.
    pub control: Option<TokenKey>,
}

/// The file in a session folder that holds the door's bearer token.
pub const DOOR_TOKEN_FILE: &str = "door.token";

/// The control surface of a session: the token's verification key and what is declared.
#[derive(Debug, Clone)]
pub struct ControlHandle {
    /// Verifies presented tokens; the token itself is only in the file.
    pub key: TokenKey,
    /// The `0600` file the token was written to; `None` in a session claimed from a lost host
    /// (the token was minted there).
    pub token_file: Option<PathBuf>,
    /// Declared settings.
    pub settings: Vec<String>,
    /// Declared secrets.
    pub secrets: Vec<String>,
}

/// The session's control surface (when `control` is enabled) and door authentication (when
/// `network.authentication: bearer`). A fresh token per start (a session resumed from its
/// folder gets a new one; the old file is replaced), except where `kept` holds a key.
pub(crate) fn tokens(
    m: &capsule_protocol::Manifest,
    dir: &Path,
    kept: KeptKeys,
) -> Result<(Option<ControlHandle>, Option<DoorAuth>), LaunchError> {
    let token = |kept: Option<TokenKey>, file: &str| match kept {
        Some(key) => Ok((key, None)),
        None => {
            let path = dir.join(file);
            TokenKey::mint(&path)
                .map(|key| (key, Some(path.clone())))
                .map_err(|source| LaunchError::Io { path, source })
        }
    };
    let control = if m.control.enabled() {
        let (key, token_file) = token(kept.control, "control.token")?;
        Some(ControlHandle {
            key,
            token_file,
            settings: m.control.settings.clone(),
            secrets: m.control.secrets.clone(),
        })
    } else {
        None
    };
    let door_auth = match m.network.authentication {
        capsule_protocol::manifest::DoorAuthentication::Bearer => {
            let (key, token_file) = token(kept.door, DOOR_TOKEN_FILE)?;
            Some(DoorAuth { key, token_file })
        }
        capsule_protocol::manifest::DoorAuthentication::None => None,
    };
    Ok((control, door_auth))
}
