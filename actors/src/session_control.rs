//! The session's control-surface operations (CONTRACT §7): settings go to the agent loop,
//! secrets to the credentials actor; each answers with the contract's refusal when it refuses.
//! The HTTP layer (`door/control.rs`) decides the refusals that come before these (token, path,
//! loopback, length, content type).

use capsule_protocol::trace::TraceKind;
use serde_json::json;
use std::time::Duration;

use crate::agent_loop::LoopMsg;
use crate::control::{ControlRefusal, Principal, SettingChange};
use crate::credentials::CredentialsMsg;
use crate::names::{self, lookup, role};
use crate::session::{Session, SessionError};

impl Session {
    /// Change a setting (`inference.driver`, `inference.max_tokens`); value checks, then the
    /// credential check (409) for a switch.
    pub async fn set_setting(
        &self,
        name: &str,
        value: serde_json::Value,
        principal: Principal,
    ) -> Result<SettingChange, ControlRefusal> {
        let l = lookup::<LoopMsg>(&names::name(&self.session_id, role::LOOP))
            .ok_or_else(|| ControlRefusal::new(503, "unavailable", "the agent loop is restarting; try again"))?;
        let r = match name {
            "inference.driver" => {
                l.call(|reply| LoopMsg::Switch { choice: value, principal, reply }, Some(Duration::from_secs(30))).await
            }
            "inference.max_tokens" => {
                l.call(|reply| LoopMsg::SetMaxTokens { value, principal, reply }, Some(Duration::from_secs(30))).await
            }
            other => {
                return Err(ControlRefusal::new(
                    404,
                    "undeclared_setting",
                    format!("`{other}` is not a setting this runtime knows"),
                ));
            }
        };
        match r {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            _ => Err(ControlRefusal::new(503, "unavailable", "the agent loop did not answer; try again")),
        }
    }

    /// Inject a secret (memory only); answers whether it replaced a value.
    pub async fn set_secret(&self, name: &str, value: &str) -> Result<bool, ControlRefusal> {
        if !crate::control::valid_secret(value) {
            return Err(ControlRefusal::new(
                422,
                "invalid_value",
                "a secret value is visible ASCII and space only, and not empty",
            ));
        }
        let c = lookup::<CredentialsMsg>(&names::name(&self.session_id, role::CREDENTIALS))
            .ok_or_else(|| ControlRefusal::new(503, "unavailable", "the credentials actor is restarting; try again"))?;
        let value = capsule_runtime::SecretKey(value.to_string());
        match c
            .call(
                |reply| CredentialsMsg::SetSecret { name: name.to_string(), value, reply },
                Some(Duration::from_secs(10)),
            )
            .await
        {
            Ok(ractor::rpc::CallResult::Success(replaced)) => {
                self.trace(TraceKind::ControlChange, json!({"secret": name, "set": true, "replaced": replaced, "principal": Principal::Operator, "token_id": self.control.as_ref().map(|c| c.key.id())}));
                Ok(replaced)
            }
            _ => Err(ControlRefusal::new(503, "unavailable", "the credentials actor did not answer; try again")),
        }
    }

    /// Forget a secret, unless it keys the choice in use (409 `in_use`).
    pub async fn forget_secret(&self, name: &str) -> Result<(), ControlRefusal> {
        let c = lookup::<CredentialsMsg>(&names::name(&self.session_id, role::CREDENTIALS))
            .ok_or_else(|| ControlRefusal::new(503, "unavailable", "the credentials actor is restarting; try again"))?;
        match c
            .call(|reply| CredentialsMsg::Forget { name: name.to_string(), reply }, Some(Duration::from_secs(10)))
            .await
        {
            Ok(ractor::rpc::CallResult::Success(r)) => {
                match &r {
                    Ok(()) => self.trace(TraceKind::ControlChange, json!({"secret": name, "set": false, "principal": Principal::Operator, "token_id": self.control.as_ref().map(|c| c.key.id())})),
                    Err(refusal) => self.trace(TraceKind::ControlRefused, json!({"secret": name, "status": refusal.status, "reason": refusal.reason, "token_id": self.control.as_ref().map(|c| c.key.id())})),
                }
                r
            }
            _ => Err(ControlRefusal::new(503, "unavailable", "the credentials actor did not answer; try again")),
        }
    }

    /// The `GET /control` body.
    pub async fn control_view(&self) -> Result<serde_json::Value, SessionError> {
        let l = lookup::<LoopMsg>(&names::name(&self.session_id, role::LOOP)).ok_or(SessionError::LoopDown)?;
        match l.call(LoopMsg::ControlView, Some(Duration::from_secs(10))).await {
            Ok(ractor::rpc::CallResult::Success(v)) => Ok(v),
            _ => Err(SessionError::LoopDown),
        }
    }
}
