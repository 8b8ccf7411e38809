//! The credentials actor: the one place keys live (besides a store's egress hook for the length
//! of one call). It resolves every driver's credential at launch, holds injected secrets in
//! memory, and decides in its one mailbox both "may the loop select choice X now?" (marking X
//! in use in the same step) and "may secret S be forgotten?", so no interleaving of switches
//! and forgets can leave the active choice without a key (CONTRACT §5–§7).
//!
//! What it decides lives in its [`CredentialsBook`], which only it changes. A gateway reads its
//! route from the book through [`Routes`] under the same lock the actor's decisions take, so a
//! route never sees half a decision, and a driver call does not wait on the actor's mailbox
//! (one hand-off fewer per turn; see docs/decisions.md).
//!
//! Sources: `config` (a host config file's `credentials.<NAME>`, re-read on every use so
//! rotation works, keeping the last good value), `environment` (read once at launch),
//! `manifest` (a literal), `injected` (a `control.secrets` name; memory only), `keyless`, and
//! `none` (an alternate whose credential resolved nowhere: staged unavailable).

use capsule_protocol::host_config::HostConfig;
use capsule_protocol::manifest::{Gateway, UpstreamAuth, interpolated_name};
use capsule_runtime::{Credential, GatewayRoute, KeyStyle, SecretKey};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

use crate::control::ControlError;

/// Where a credential comes from; recorded as `credential_source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum CredentialSource {
    /// A host config file.
    Config,
    /// The process environment, read at launch.
    Environment,
    /// A literal in the manifest.
    Manifest,
    /// A control-surface secret.
    Injected,
    /// No credential needed.
    Keyless,
    /// Nothing resolved.
    None,
}

#[derive(Clone)]
enum Key {
    Keyless,
    Literal(SecretKey),
    Environment(SecretKey),
    Config { name: String, path: PathBuf, last: SecretKey },
    Injected(String),
    Unresolved(String),
}

/// One driver's gateway and credential.
#[derive(Clone)]
pub struct DriverCredential {
    /// Real endpoint.
    pub endpoint: http::Uri,
    key: Key,
    upstream_auth: Option<UpstreamAuth>,
    /// How the key goes upstream without `upstream_auth`: from the driver's kind.
    pub style: KeyStyle,
}

impl std::fmt::Debug for DriverCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverCredential")
            .field("endpoint", &self.endpoint)
            .field("source", &self.source())
            .field("name", &self.name())
            .finish_non_exhaustive()
    }
}

/// Where `${NAME}` may come from at launch.
pub struct Sources<'a> {
    /// The environment snapshot.
    pub env: &'a HashMap<String, String>,
    /// The host config and its path (re-read on use).
    pub config: Option<(&'a HostConfig, PathBuf)>,
    /// Declared `control.secrets`.
    pub secrets: &'a [String],
}

impl DriverCredential {
    /// Resolve a gateway's credential. A `${NAME}` resolves to an injected secret when `NAME`
    /// is a declared `control.secrets` entry, else the host config, else the environment;
    /// nowhere gives a credential that is unresolved (the caller refuses or stages it).
    pub fn resolve(
        g: &Gateway,
        upstream_auth: Option<UpstreamAuth>,
        src: &Sources<'_>,
    ) -> Result<DriverCredential, String> {
        let endpoint: http::Uri =
            g.endpoint.parse().map_err(|_| format!("endpoint `{}` is not a valid URL", g.endpoint))?;
        let key = match (&g.api_key, g.keyless) {
            (_, true) | (None, _) => Key::Keyless,
            (Some(k), false) => match interpolated_name(k) {
                None => Key::Literal(SecretKey(k.clone())),
                Some(name) if src.secrets.iter().any(|s| s == name) => Key::Injected(name.to_string()),
                Some(name) => {
                    let from_config = src.config.as_ref().and_then(|(c, p)| {
                        c.credentials.get(name).filter(|v| !v.is_empty()).map(|v| (v.clone(), p.clone()))
                    });
                    match (from_config, src.env.get(name).filter(|v| !v.is_empty())) {
                        (Some((v, path)), _) => Key::Config { name: name.to_string(), path, last: SecretKey(v) },
                        (None, Some(v)) => Key::Environment(SecretKey(v.clone())),
                        (None, None) => Key::Unresolved(name.to_string()),
                    }
                }
            },
        };
        Ok(DriverCredential { endpoint, key, upstream_auth, style: KeyStyle::ByPath })
    }

    /// The source, as traced.
    pub fn source(&self) -> CredentialSource {
        match self.key {
            Key::Keyless => CredentialSource::Keyless,
            Key::Literal(_) => CredentialSource::Manifest,
            Key::Environment(_) => CredentialSource::Environment,
            Key::Config { .. } => CredentialSource::Config,
            Key::Injected(_) => CredentialSource::Injected,
            Key::Unresolved(_) => CredentialSource::None,
        }
    }

    /// The credential's name (`${NAME}`), when it has one.
    pub fn name(&self) -> Option<&str> {
        match &self.key {
            Key::Config { name, .. } | Key::Injected(name) | Key::Unresolved(name) => Some(name),
            _ => None,
        }
    }

    /// Whether this credential resolved at launch (an injected one counts: it is declared).
    pub fn staged(&self) -> bool {
        !matches!(self.key, Key::Unresolved(_))
    }

    /// Whether it can produce a value at launch, before any secret was injected: what
    /// `available` means in `session_start`, as `GET /control` means it later.
    pub fn available_at_launch(&self) -> bool {
        !matches!(self.key, Key::Unresolved(_) | Key::Injected(_))
    }

    /// The key now: a config source is re-read (keeping the last good value on failure).
    fn current(&mut self, secrets: &HashMap<String, SecretKey>) -> Result<Option<SecretKey>, String> {
        match &mut self.key {
            Key::Keyless => Ok(None),
            Key::Literal(k) | Key::Environment(k) => Ok(Some(k.clone())),
            Key::Config { name, path, last } => {
                let fresh = std::fs::read_to_string(&*path)
                    .ok()
                    .and_then(|t| capsule_protocol::host_config::parse(&t, "host config").ok())
                    .and_then(|c| c.credentials.get(name.as_str()).filter(|v| !v.is_empty()).cloned());
                if let Some(v) = fresh {
                    *last = SecretKey(v);
                }
                Ok(Some(last.clone()))
            }
            Key::Injected(name) => secrets.get(name.as_str()).cloned().map(Some).ok_or_else(|| {
                format!("credential `{name}` is a control secret with no value; PUT /control/secrets/{name} first")
            }),
            Key::Unresolved(name) => Err(format!(
                "credential `{name}` resolved nowhere at launch (not a control secret, not in the host config, not in the environment)"
            )),
        }
    }

    fn route(&mut self, secrets: &HashMap<String, SecretKey>) -> Result<GatewayRoute, String> {
        let key = self.current(secrets)?;
        let fixed = match (&self.upstream_auth, &key) {
            (Some(a), Some(k)) => Credential::templated(&a.header, &a.value, &k.0),
            _ => None,
        };
        Ok(GatewayRoute { endpoint: self.endpoint.clone(), fixed, key, style: self.style, traceparent: None })
    }
}

/// What the credentials actor decides and answers: selecting a choice, and setting,
/// forgetting and listing secrets (routes are read through [`Routes`]).
pub enum CredentialsMsg {
    /// May the choice `index` be the one in use? If yes it is in use from this step on, and
    /// the answer is the index it replaced.
    Select {
        /// Choice index.
        index: usize,
        /// Answer.
        reply: RpcReplyPort<Result<usize, ControlError>>,
    },
    /// Inject a secret; answers whether it replaced a value.
    SetSecret {
        /// Name (a declared `control.secrets` entry).
        name: String,
        /// Value (memory only).
        value: SecretKey,
        /// Answer.
        reply: RpcReplyPort<bool>,
    },
    /// Forget a secret, unless it keys the choice in use.
    Forget {
        /// Name.
        name: String,
        /// Answer.
        reply: RpcReplyPort<Result<(), ControlError>>,
    },
    /// Per choice, whether its credential can produce a value now; and each secret's `set`.
    Status(RpcReplyPort<CredentialsStatus>),
    /// Crash (a test hook: its restart must keep the choice in use and the secrets).
    InjectPanic,
}

/// What `GET /control` shows of credentials.
#[derive(Debug, Clone, Default)]
pub struct CredentialsStatus {
    /// Per choice (in choice order), whether its credential can produce a value now.
    pub available: Vec<bool>,
    /// Each declared secret and whether it holds a value.
    pub secrets: Vec<(String, bool)>,
}

/// The state the credentials actor owns and keeps across its restarts: every driver's
/// credential, the driver choice in use and the injected secrets (in memory only, never on
/// disk). It lives in the actor's arguments, so a restarted actor starts from it instead of
/// from the manifest. Only the actor decides (switches, secrets); the loop reads the choice in
/// use per call through [`ChoiceInUse`], and each gateway its route through [`Routes`].
#[derive(Clone, Default)]
pub struct CredentialsBook(Arc<Mutex<Held>>);

#[derive(Default)]
struct Held {
    active: usize,
    values: HashMap<String, SecretKey>,
    drivers: HashMap<String, DriverCredential>,
}

impl CredentialsBook {
    /// A book holding the drivers' credentials resolved at launch, choice 0 in use.
    pub fn new(drivers: HashMap<String, DriverCredential>) -> CredentialsBook {
        CredentialsBook(Arc::new(Mutex::new(Held { drivers, ..Held::default() })))
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The read-only view of the choice in use, for the loop.
    pub fn choice_in_use(&self) -> ChoiceInUse {
        ChoiceInUse(self.clone())
    }

    /// The read view of the routes, for the gateways.
    pub fn routes(&self) -> Routes {
        Routes(self.clone())
    }
}

/// The gateways' view of the book: the route for a driver's next call. Only a book made
/// with the session's credentials hands one out (no `Default`: an empty book would route
/// every driver without a gateway).
#[derive(Clone)]
pub struct Routes(CredentialsBook);

impl Routes {
    /// The route for `artifact`'s next call: `Ok(None)` for a driver without a gateway, `Err`
    /// naming the credential when it cannot produce a value (the call is refused). A `config`
    /// credential is re-read here, keeping the last good value.
    pub fn route(&self, artifact: &str) -> Result<Option<GatewayRoute>, String> {
        let mut held = self.0.held();
        let Held { values, drivers, .. } = &mut *held;
        match drivers.get_mut(artifact) {
            None => Ok(None),
            Some(c) => c.route(values).map(Some),
        }
    }
}

impl std::fmt::Debug for Routes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Routes")
    }
}

/// Which driver choice is in use (an index into the capsule's choices, primary first): read
/// per call by the loop, decided only by the credentials actor.
#[derive(Clone, Default)]
pub struct ChoiceInUse(CredentialsBook);

impl ChoiceInUse {
    /// The index now.
    pub fn get(&self) -> usize {
        self.0.held().active
    }
}

impl std::fmt::Debug for ChoiceInUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ChoiceInUse({})", self.get())
    }
}

/// What the actor is started (and restarted) with.
#[derive(Clone)]
pub struct CredentialsArgs {
    /// The driver artifact of each choice, in choice order.
    pub choices: Vec<String>,
    /// Declared secret names.
    pub secrets: Vec<String>,
    /// The drivers' credentials, the choice in use and the injected secrets, kept across
    /// restarts.
    pub book: CredentialsBook,
}

/// The actor's state: its arguments (the book is shared with its next incarnation).
pub struct CredentialsState {
    args: CredentialsArgs,
}

impl CredentialsState {
    fn available(&mut self, index: usize) -> Result<(), String> {
        let Some(artifact) = self.args.choices.get(index) else { return Err("no such choice".into()) };
        let mut held = self.args.book.held();
        let Held { values, drivers, .. } = &mut *held;
        match drivers.get_mut(artifact) {
            None => Ok(()),
            Some(c) => c.current(values).map(|_| ()),
        }
    }
}

/// The credentials actor: the one decision point for keys, the choice in use and secrets.
pub struct Credentials;

impl Actor for Credentials {
    type Msg = CredentialsMsg;
    type State = CredentialsState;
    type Arguments = CredentialsArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<CredentialsMsg>,
        args: CredentialsArgs,
    ) -> Result<CredentialsState, ActorProcessingErr> {
        Ok(CredentialsState { args })
    }

    async fn handle(
        &self,
        _myself: ActorRef<CredentialsMsg>,
        msg: CredentialsMsg,
        state: &mut CredentialsState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            CredentialsMsg::Select { index, reply } => {
                let r = match state.available(index) {
                    Ok(()) => Ok(std::mem::replace(&mut state.args.book.held().active, index)),
                    Err(why) => Err(ControlError::CredentialUnresolvable { why }),
                };
                let _ = reply.send(r);
            }
            CredentialsMsg::SetSecret { name, value, reply } => {
                let replaced = state.args.book.held().values.insert(name, value).is_some();
                let _ = reply.send(replaced);
            }
            CredentialsMsg::Forget { name, reply } => {
                let mut held = state.args.book.held();
                let active_artifact = state.args.choices.get(held.active).cloned().unwrap_or_default();
                let in_use = held
                    .drivers
                    .get(&active_artifact)
                    .is_some_and(|c| matches!(&c.key, Key::Injected(n) if *n == name));
                let r = if in_use {
                    Err(ControlError::InUse { name: name.clone() })
                } else {
                    held.values.remove(&name);
                    Ok(())
                };
                let _ = reply.send(r);
            }
            CredentialsMsg::Status(reply) => {
                let available = (0..state.args.choices.len()).map(|i| state.available(i).is_ok()).collect();
                let held = state.args.book.held();
                let secrets = state.args.secrets.iter().map(|s| (s.clone(), held.values.contains_key(s))).collect();
                let _ = reply.send(CredentialsStatus { available, secrets });
            }
            CredentialsMsg::InjectPanic => panic!("credentials: injected panic (test hook)"),
        }
        Ok(())
    }
}
