//! The session's control operations (CONTRACT §7), which the HTTP handler acts through:
//! settings go to the agent loop, secrets to the credentials actor, and each answers with a
//! [`ControlError`] when it refuses. The refusals before these (token, path, loopback, length,
//! content type) are the handler's.

use capsule_protocol::trace::TraceKind;
use serde_json::json;

use super::{ControlError, Principal, SettingChange};
use crate::agent_loop::LoopMsg;
use crate::credentials::CredentialsMsg;
use crate::names::role;
use crate::peer::wait;
use crate::session::Session;

impl Session {
    /// Change a setting (`inference.driver`, `inference.max_tokens`): the loop checks the
    /// value, then, for a switch, Credentials decides whether the choice can be used now.
    pub async fn set_setting(
        &self,
        name: &str,
        value: serde_json::Value,
        principal: Principal,
    ) -> Result<SettingChange, ControlError> {
        let l = self.peer(role::LOOP);
        match name {
            "inference.driver" => {
                l.ask(|reply| LoopMsg::Switch { choice: value, principal, reply }, wait::CONTROL).await?
            }
            "inference.max_tokens" => {
                l.ask(|reply| LoopMsg::SetMaxTokens { value, principal, reply }, wait::CONTROL).await?
            }
            other => Err(ControlError::UndeclaredSetting {
                name: other.to_string(),
                declared: vec!["inference.driver".into(), "inference.max_tokens".into()],
            }),
        }
    }

    fn token_id(&self) -> Option<String> {
        self.control.as_ref().map(|c| c.key.id())
    }

    /// Inject a secret (memory only); answers whether it replaced a value.
    pub async fn set_secret(&self, name: &str, value: &str) -> Result<bool, ControlError> {
        if !super::valid_secret(value) {
            return Err(ControlError::InvalidValue {
                why: "a secret value is visible ASCII and space only, and not empty".into(),
            });
        }
        let value = capsule_runtime::SecretKey(value.to_string());
        let name = name.to_string();
        let replaced = self
            .peer(role::CREDENTIALS)
            .ask(|reply| CredentialsMsg::SetSecret { name: name.clone(), value, reply }, wait::CONTROL)
            .await?;
        self.trace(TraceKind::ControlChange, json!({"secret": name, "set": true, "replaced": replaced, "principal": Principal::Operator, "token_id": self.token_id()}));
        Ok(replaced)
    }

    /// Forget a secret, unless it keys the choice in use (409 `in_use`).
    pub async fn forget_secret(&self, name: &str) -> Result<(), ControlError> {
        let name = name.to_string();
        self.peer(role::CREDENTIALS)
            .ask(|reply| CredentialsMsg::Forget { name: name.clone(), reply }, wait::CONTROL)
            .await??;
        self.trace(
            TraceKind::ControlChange,
            json!({"secret": name, "set": false, "principal": Principal::Operator, "token_id": self.token_id()}),
        );
        Ok(())
    }

    /// The `GET /control` body.
    pub async fn control_view(&self) -> Result<serde_json::Value, ControlError> {
        Ok(self.peer(role::LOOP).ask(LoopMsg::ControlView, wait::CONTROL).await?)
    }
}
