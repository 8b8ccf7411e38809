//! The credentials actor: resolves each driver's credential at launch and hands the gateway a
//! route (endpoint + credential) per call. Keys live only here and in the gateway's egress
//! hook for the length of one call; they never enter a guest, a frame, the trace or a log.
//!
//! Sources (CONTRACT §5): `environment` (read once at launch), `manifest` (a literal),
//! `keyless`, or `none`. The `config` and `injected` sources and switching checks build on
//! this actor (issue 5).

use capsule_protocol::manifest::{Gateway, UpstreamAuth, interpolated_name};
use capsule_runtime::{Credential, GatewayRoute};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::HashMap;

use capsule_runtime::SecretKey;

/// Where a credential came from; recorded as `credential_source`.
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

/// One driver's resolved gateway.
#[derive(Clone)]
pub struct DriverCredential {
    /// Real endpoint.
    pub endpoint: http::Uri,
    /// Source.
    pub source: CredentialSource,
    /// The variable named by `${NAME}`, when any.
    pub variable: Option<String>,
    key: Option<SecretKey>,
    upstream_auth: Option<UpstreamAuth>,
}

impl std::fmt::Debug for DriverCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DriverCredential").field("endpoint", &self.endpoint).field("source", &self.source).field("variable", &self.variable).finish_non_exhaustive()
    }
}

impl DriverCredential {
    /// Resolve a gateway against an environment snapshot. `Err` names the variable that
    /// resolved nowhere.
    pub fn resolve(g: &Gateway, upstream_auth: Option<UpstreamAuth>, env: &HashMap<String, String>) -> Result<DriverCredential, String> {
        let endpoint: http::Uri = g.endpoint.parse().map_err(|_| format!("endpoint `{}` is not a valid URL", g.endpoint))?;
        let (source, variable, key) = match (&g.api_key, g.keyless) {
            (_, true) | (None, _) => (CredentialSource::Keyless, None, None),
            (Some(k), false) => match interpolated_name(k) {
                Some(name) => match env.get(name).filter(|v| !v.is_empty()) {
                    Some(v) => (CredentialSource::Environment, Some(name.to_string()), Some(SecretKey(v.clone()))),
                    None => return Err(name.to_string()),
                },
                None => (CredentialSource::Manifest, None, Some(SecretKey(k.clone()))),
            },
        };
        Ok(DriverCredential { endpoint, source, variable, key, upstream_auth })
    }

    fn route(&self) -> GatewayRoute {
        let fixed = match (&self.upstream_auth, &self.key) {
            (Some(a), Some(k)) => Credential::templated(&a.header, &a.value, &k.0),
            _ => None,
        };
        GatewayRoute { endpoint: self.endpoint.clone(), fixed, key: self.key.clone() }
    }
}

/// Messages.
pub enum CredentialsMsg {
    /// The route for a driver's next call (`None` for a driver without a gateway).
    Route {
        /// Driver artifact.
        artifact: String,
        /// Answer.
        reply: RpcReplyPort<Option<GatewayRoute>>,
    },
}

/// The actor; its argument is the resolved table.
pub struct Credentials;

impl Actor for Credentials {
    type Msg = CredentialsMsg;
    type State = HashMap<String, DriverCredential>;
    type Arguments = HashMap<String, DriverCredential>;

    async fn pre_start(&self, _myself: ActorRef<CredentialsMsg>, table: Self::Arguments) -> Result<Self::State, ActorProcessingErr> {
        Ok(table)
    }

    async fn handle(&self, _myself: ActorRef<CredentialsMsg>, msg: CredentialsMsg, state: &mut Self::State) -> Result<(), ActorProcessingErr> {
        match msg {
            CredentialsMsg::Route { artifact, reply } => {
                let _ = reply.send(state.get(&artifact).map(DriverCredential::route));
            }
        }
        Ok(())
    }
}
