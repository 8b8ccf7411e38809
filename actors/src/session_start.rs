//! The `session_start` trace line: what a session was launched with (capsule, model, driver,
//! artifacts and their cache, credential sources, choices, door and control tokens by id, the
//! owning host in a cluster).

use serde_json::{Value, json};
use std::collections::HashMap;

use crate::choices::DriverChoice;
use crate::launch::{LaunchOptions, Prepared};
use crate::session::Session;

/// What the line is made from.
pub(crate) struct Launched<'a> {
    pub prepared: &'a Prepared,
    pub opts: &'a LaunchOptions,
    pub choices: &'a [DriverChoice],
    pub driver: &'a str,
    pub resumed: bool,
    pub cluster: Option<Value>,
    pub session: &'a Session,
}

/// The fields of `session_start`.
pub(crate) fn fields(l: &Launched<'_>) -> Value {
    let m = &l.prepared.manifest;
    let artifacts: Vec<_> = l
        .prepared
        .artifacts
        .iter()
        .map(|a| json!({"name": a.decl.name, "runtime": a.decl.runtime, "cache": format!("{:?}", a.loaded.cache_hit).to_lowercase(), "load_ms": a.loaded.load_time.as_secs_f64() * 1000.0}))
        .collect();
    let credential_sources: HashMap<_, _> =
        l.prepared.credentials.iter().map(|(k, v)| (k.clone(), v.source())).collect();
    let mut start = json!({
        "capsule": m.name, "version": m.version, "model": m.inference.model, "driver": l.driver,
        "workdir": l.prepared.workdir, "artifacts": artifacts, "credential_source": credential_sources,
        "manifest": std::fs::canonicalize(crate::launch::manifest_path(&l.opts.manifest)).ok(), "resumed": l.resumed,
        // So `--resume` sends the primary driver's traffic where this session did.
        "endpoint_override": l.opts.endpoint_override.as_ref().map(|o| json!({"endpoint": o.endpoint, "keyless": o.keyless})),
    });
    if let Some(c) = &l.cluster {
        start["cluster"] = c.clone();
    }
    if !m.inference.alternates.is_empty() {
        start["inference_choices"] = json!(l.choices.iter().map(|c| {
            let cred = l.prepared.credentials.get(&c.driver);
            // `available` as `GET /control` means it: a switch to it would be accepted now.
            json!({"name": c.name, "driver": c.artifact, "model": c.model, "max_tokens": c.max_tokens, "context_window": c.context_window,
                   "credential_source": cred.map(|x| x.source()), "available": cred.is_none_or(|x| x.available_at_launch())})
        }).collect::<Vec<_>>());
    }
    if let Some(d) = &l.session.door_auth {
        start["door_authentication"] = json!({"scheme": "bearer", "token_id": d.key.id()});
    }
    if let Some(c) = &l.session.control {
        start["control"] = json!({"settings": c.settings, "secrets": c.secrets, "token_id": c.key.id(), "agent_settings": m.control.agent_settings});
    }
    start
}
