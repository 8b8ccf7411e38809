//! Settings the loop owns: the driver choice in use and a controller's `inference.max_tokens`.
//! A switch asks the credentials actor, which checks that the target choice can produce a key
//! now and marks it in use in the same step (one decision point with forgetting secrets).

use capsule_protocol::trace::{TraceEvent, TraceKind};
use serde_json::{Value, json};
use std::time::Duration;

use super::LoopState;
use crate::control::{ChoiceView, ControlRefusal, Principal, SettingChange};
use crate::credentials::CredentialsMsg;
use crate::names::{self, lookup, role};

impl LoopState {
    fn choice_names(&self) -> String {
        self.config.choices.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    pub(crate) fn trace_control(&self, kind: TraceKind, fields: Value) {
        if let Some(j) = lookup::<crate::journal::JournalMsg>(&names::name(&self.config.session_id, role::JOURNAL)) {
            let _ = j.cast(crate::journal::JournalMsg::Trace(TraceEvent::new(
                kind,
                &self.config.session_id,
                crate::now_ms(),
                fields,
            )));
        }
    }

    fn refused(&self, setting: &str, principal: Principal, r: ControlRefusal) -> ControlRefusal {
        self.trace_control(TraceKind::ControlRefused, json!({"setting": setting, "principal": principal, "status": r.status, "reason": r.reason, "error": r.error, "token_id": self.config.token_id}));
        r
    }

    /// Select a choice by name.
    pub(crate) async fn switch(
        &mut self,
        value: &Value,
        principal: Principal,
    ) -> Result<SettingChange, ControlRefusal> {
        const SETTING: &str = "inference.driver";
        let Some(name) = value.as_str() else {
            return Err(self.refused(
                SETTING,
                principal,
                ControlRefusal::new(
                    422,
                    "invalid_value",
                    format!("inference.driver takes a choice name as a string; choices: {}", self.choice_names()),
                ),
            ));
        };
        let Some(index) = self.config.choices.iter().position(|c| c.name == name) else {
            return Err(self.refused(
                SETTING,
                principal,
                ControlRefusal::new(
                    422,
                    "undeclared_driver",
                    format!("`{name}` is not a driver choice of this capsule; choices: {}", self.choice_names()),
                ),
            ));
        };
        let decided = match lookup::<CredentialsMsg>(&names::name(&self.config.session_id, role::CREDENTIALS)) {
            Some(c) => {
                match c.call(|reply| CredentialsMsg::Select { index, reply }, Some(Duration::from_secs(10))).await {
                    Ok(ractor::rpc::CallResult::Success(r)) => r,
                    _ => Err(ControlRefusal::new(
                        409,
                        "credential_unresolvable",
                        "the credentials actor did not answer; try again",
                    )),
                }
            }
            None => Err(ControlRefusal::new(
                409,
                "credential_unresolvable",
                "the credentials actor is restarting; try again",
            )),
        };
        if let Err(r) = decided {
            return Err(self.refused(SETTING, principal, r));
        }
        let previous = self.config.choices[self.active].name.clone();
        self.active = index;
        self.trace_control(TraceKind::ControlChange, json!({"setting": SETTING, "previous": previous, "value": name, "principal": principal, "token_id": if principal == Principal::Operator { json!(self.config.token_id) } else { Value::Null }}));
        Ok(SettingChange {
            name: SETTING.into(),
            previous: json!(previous),
            value: json!(name),
            applies_from: "next_inference_call",
        })
    }

    /// Set the cap of every later call.
    pub(crate) fn set_max_tokens(
        &mut self,
        value: &Value,
        principal: Principal,
    ) -> Result<SettingChange, ControlRefusal> {
        const SETTING: &str = "inference.max_tokens";
        let Some(v) = value.as_u64().filter(|v| (1..=u64::from(u32::MAX)).contains(v)) else {
            return Err(self.refused(
                SETTING,
                principal,
                ControlRefusal::new(422, "invalid_value", "inference.max_tokens takes an integer from 1 to 4294967295"),
            ));
        };
        let previous = self.max_tokens_override.map(|p| json!(p)).unwrap_or(Value::Null);
        self.max_tokens_override = Some(v as u32);
        self.trace_control(TraceKind::ControlChange, json!({"setting": SETTING, "previous": previous, "value": v, "principal": principal, "token_id": self.config.token_id}));
        Ok(SettingChange { name: SETTING.into(), previous, value: json!(v), applies_from: "next_inference_call" })
    }

    /// The `GET /control` body.
    pub(crate) async fn control_view(&self) -> Value {
        let (available, secrets) =
            match lookup::<CredentialsMsg>(&names::name(&self.config.session_id, role::CREDENTIALS)) {
                Some(c) => match c.call(CredentialsMsg::Status, Some(Duration::from_secs(10))).await {
                    Ok(ractor::rpc::CallResult::Success(s)) => s,
                    _ => (Vec::new(), Vec::new()),
                },
                None => (Vec::new(), Vec::new()),
            };
        let settings: Vec<Value> = self
            .config
            .control_settings
            .iter()
            .map(|s| match s.as_str() {
                "inference.driver" => {
                    let choices: Vec<ChoiceView> = self
                        .config
                        .choices
                        .iter()
                        .enumerate()
                        .map(|(i, c)| ChoiceView {
                            name: c.name.clone(),
                            driver: c.driver.clone(),
                            model: c.model.clone(),
                            available: available.get(i).copied().unwrap_or(false),
                        })
                        .collect();
                    json!({"name": s, "value": self.config.choices[self.active].name, "choices": choices})
                }
                _ => json!({"name": s, "value": self.max_tokens_override}),
            })
            .collect();
        let secrets: Vec<Value> = secrets.into_iter().map(|(name, set)| json!({"name": name, "set": set})).collect();
        json!({"session_id": self.config.session_id, "settings": settings, "secrets": secrets})
    }
}
