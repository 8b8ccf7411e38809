//! Settings the loop owns: the driver choice in use and a controller's `inference.max_tokens`.
//! A switch asks the credentials actor, which checks that the target choice can produce a key
//! now and marks it in use in the same step (one decision point with forgetting secrets).

use capsule_protocol::trace::TraceKind;
use serde_json::{Value, json};

use super::LoopState;
use crate::control::{ChoiceView, ControlError, Principal, SettingChange};
use crate::credentials::CredentialsMsg;
use crate::names::role;
use crate::peer::wait;

impl LoopState {
    fn choice_names(&self) -> String {
        self.config.choices.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// A refusal of the agent's `switch-driver` tool is traced here; an operator's is traced
    /// by the HTTP handler that answers it.
    fn refused(&self, setting: &str, principal: Principal, e: ControlError) -> ControlError {
        if principal == Principal::Agent {
            let mut fields = e.trace_fields();
            fields["setting"] = json!(setting);
            fields["principal"] = json!(principal);
            self.trace(TraceKind::ControlRefused, fields);
        }
        e
    }

    /// Select a choice by name.
    pub(crate) async fn switch(&mut self, value: &Value, principal: Principal) -> Result<SettingChange, ControlError> {
        const SETTING: &str = "inference.driver";
        let Some(name) = value.as_str() else {
            return Err(self.refused(
                SETTING,
                principal,
                ControlError::InvalidValue {
                    why: format!("inference.driver takes a choice name as a string; choices: {}", self.choice_names()),
                },
            ));
        };
        let Some(index) = self.config.choices.iter().position(|c| c.name == name) else {
            return Err(self.refused(
                SETTING,
                principal,
                ControlError::UndeclaredDriver { name: name.to_string(), choices: self.choice_names() },
            ));
        };
        let decided = self
            .peer(role::CREDENTIALS)
            .ask(|reply| CredentialsMsg::Select { index, reply }, wait::CONTROL)
            .await
            .unwrap_or_else(|e| Err(ControlError::Unavailable(e)));
        let previous = match decided {
            Ok(previous) => self.config.choices[previous].name.clone(),
            Err(r) => return Err(self.refused(SETTING, principal, r)),
        };
        self.trace(TraceKind::ControlChange, json!({"setting": SETTING, "previous": previous, "value": name, "principal": principal, "token_id": if principal == Principal::Operator { json!(self.config.token_id) } else { Value::Null }}));
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
    ) -> Result<SettingChange, ControlError> {
        const SETTING: &str = "inference.max_tokens";
        let Some(v) = value.as_u64().filter(|v| (1..=u64::from(u32::MAX)).contains(v)) else {
            return Err(self.refused(
                SETTING,
                principal,
                ControlError::InvalidValue { why: "inference.max_tokens takes an integer from 1 to 4294967295".into() },
            ));
        };
        let previous = self.config.cap.get().map(|p| json!(p)).unwrap_or(Value::Null);
        self.config.cap.set(v as u32);
        self.trace(TraceKind::ControlChange, json!({"setting": SETTING, "previous": previous, "value": v, "principal": principal, "token_id": self.config.token_id}));
        Ok(SettingChange { name: SETTING.into(), previous, value: json!(v), applies_from: "next_inference_call" })
    }

    /// The `GET /control` body.
    pub(crate) async fn control_view(&self) -> Value {
        let crate::credentials::CredentialsStatus { available, secrets } =
            self.peer(role::CREDENTIALS).ask(CredentialsMsg::Status, wait::CONTROL).await.unwrap_or_default();
        let in_use = &self.config.choices[self.config.choice_in_use.get().min(self.config.choices.len() - 1)];
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
                            driver: c.artifact.clone(),
                            model: c.model.clone(),
                            available: available.get(i).copied().unwrap_or(false),
                        })
                        .collect();
                    json!({"name": s, "value": in_use.name, "choices": choices})
                }
                // The cap in force: a controller's, else the choice in use's own.
                _ => json!({"name": s, "value": self.config.cap.get().unwrap_or(in_use.max_tokens)}),
            })
            .collect();
        let secrets: Vec<Value> = secrets.into_iter().map(|(name, set)| json!({"name": name, "set": set})).collect();
        json!({"session_id": self.config.session_id, "settings": settings, "secrets": secrets})
    }
}
