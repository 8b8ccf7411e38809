//! The gateway actor: one per driver artifact. It runs that driver's calls: reads the route
//! from the credentials book (what the credentials actor decided), builds the store's grants with the credential in the
//! egress hook only, calls the component, makes the coalescer flush, and answers. While a
//! call's request is out, the driver's next instance is made (`capsule_runtime::Ahead`); a
//! final answer drops it.
//!
//! Guarantees: one call at a time per driver (mailbox order); every failure is an
//! [`InferenceError`] value in the reply; progress frames of a call are flushed to the emitter
//! before the reply is sent, so they precede the call's `artifact` frames.

use capsule_protocol::neutral::{DriverResponse, StopReason};
use capsule_runtime::{Ahead, Grants, Host, LoadedArtifact, ToolInput, ToolStatus, Waits};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::coalescer::CoalescerMsg;
use crate::emitter::EmitterMsg;
use crate::error::InferenceError;
use crate::names::role;
use crate::peer::{Peer, wait};
use crate::sink::DriverSink;
use crate::wire::WireRequest;

/// What a driver's gateway is asked: run one inference call through the driver component
/// (and a test hook that crashes it).
pub enum GatewayMsg {
    /// Run one inference call.
    Infer {
        /// Task the frames belong to.
        task_id: String,
        /// The neutral request.
        request: Arc<WireRequest>,
        /// The choice's `MURMUR_INFERENCE_DRIVER_CONFIG`, for this call.
        config: Option<String>,
        /// Whether the call's progress reaches the event stream: an agent-loop call's does; an
        /// internal call's (a hook's `run-inference`) never does.
        frames: bool,
        /// The W3C `traceparent` of the task the call serves, sent upstream.
        traceparent: Option<String>,
        /// Held until the step before the call is journaled: the driver may build its request
        /// meanwhile, but nothing is sent before it opens (`None`: nothing to wait for).
        gate: Option<capsule_runtime::SendGate>,
        /// Answer.
        reply: RpcReplyPort<InferReply>,
    },
    /// Test hook: panic inside the handler, as a host bug would.
    InjectPanic,
}

/// The answer to an `Infer`.
#[derive(Debug)]
pub struct InferReply {
    /// The response, or why there is none.
    pub result: Result<DriverResponse, InferenceError>,
    /// Time the call spent getting its instance.
    pub instantiate_time: Duration,
    /// Whether the instance was made ahead of the call (`capsule_runtime::Ahead`).
    pub made_ahead: bool,
    /// Whole call time in the gateway.
    pub call_time: Duration,
    /// The driver's `continuation_id` metadata: `Some("")` or `None` drop a held id.
    pub continuation_id: Option<String>,
    /// The provider's last HTTP status (and `retry-after`), for deciding on a retry.
    pub upstream: Option<capsule_runtime::UpstreamStatus>,
}

impl InferReply {
    /// A call that failed before any driver ran.
    pub fn failed(e: InferenceError) -> Self {
        InferReply {
            result: Err(e),
            instantiate_time: Duration::ZERO,
            made_ahead: false,
            call_time: Duration::ZERO,
            continuation_id: None,
            upstream: None,
        }
    }
}

/// What a gateway is started with (and restarted with).
#[derive(Clone)]
pub struct GatewayArgs {
    /// Session id (for registry names).
    pub session_id: String,
    /// The sandbox host.
    pub host: Host,
    /// The loaded driver.
    pub artifact: LoadedArtifact,
    /// Grants without the gateway route (added per call).
    pub grants: Grants,
    /// The credentials book's routes, read per call.
    pub routes: crate::credentials::Routes,
    /// The session's waits for its provider, told of each request out and of each answer that
    /// asks for no tools (the tools actor makes its next instance in the wait).
    pub waits: Waits,
}

/// One driver's gateway: runs its calls, with the credential only in the call's egress hook.
pub struct Gateway;

/// A gateway's state: what it was started with, and its driver's next instance.
pub struct GatewayState {
    args: GatewayArgs,
    /// The driver's next instance, made while the provider answers (`capsule_runtime::Ahead`).
    ahead: Ahead,
    /// The environment of the last call and the choice it was made for.
    env: Option<CallEnv>,
}

/// A call's driver environment: the launch's, with the choice's model and driver config.
struct CallEnv {
    model: String,
    config: Option<String>,
    env: Arc<[(String, String)]>,
}

impl CallEnv {
    /// The environment for a call of `model` with `config`, `last`'s when it was made for the
    /// same choice (each call of a session, until an operator switches): built again only on a
    /// switch.
    fn of(
        last: &mut Option<CallEnv>,
        launch: &[(String, String)],
        model: &str,
        config: Option<String>,
    ) -> Arc<[(String, String)]> {
        if let Some(e) = last.as_ref()
            && e.model == model
            && e.config == config
        {
            return e.env.clone();
        }
        let env: Arc<[(String, String)]> = launch
            .iter()
            .filter(|(k, _)| k != "MURMUR_INFERENCE_MODEL" && k != "MURMUR_INFERENCE_DRIVER_CONFIG")
            .cloned()
            .chain(std::iter::once(("MURMUR_INFERENCE_MODEL".to_string(), model.to_string())))
            .chain(config.clone().map(|c| ("MURMUR_INFERENCE_DRIVER_CONFIG".to_string(), c)))
            .collect();
        *last = Some(CallEnv { model: model.to_string(), config, env: env.clone() });
        env
    }
}

impl Actor for Gateway {
    type Msg = GatewayMsg;
    type State = GatewayState;
    type Arguments = GatewayArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<GatewayMsg>,
        args: GatewayArgs,
    ) -> Result<GatewayState, ActorProcessingErr> {
        let ahead = Ahead::telling(args.waits.clone());
        Ok(GatewayState { args, ahead, env: None })
    }

    async fn handle(
        &self,
        _myself: ActorRef<GatewayMsg>,
        msg: GatewayMsg,
        state: &mut GatewayState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            GatewayMsg::Infer { task_id, request, config, frames, traceparent, gate, reply } => {
                let call = Call { task_id, config, frames, traceparent, gate };
                let r = infer(state, call, &request).await;
                // A final answer ends the task: no next call soon, so no instance is kept for
                // one (an answer that asks for tools, or a failure that may be retried, keeps it).
                let last = matches!(&r.result, Ok(resp) if resp.stop_reason != StopReason::ToolCall);
                let tools_next = matches!(&r.result, Ok(resp) if resp.stop_reason == StopReason::ToolCall);
                let _ = reply.send(r);
                if last {
                    state.ahead.clear();
                }
                if !tools_next {
                    state.args.waits.answered_without_tools();
                }
            }
            GatewayMsg::InjectPanic => panic!("gateway: injected panic (test hook)"),
        }
        Ok(())
    }
}

/// What one call carries besides its request.
struct Call {
    task_id: String,
    config: Option<String>,
    frames: bool,
    traceparent: Option<String>,
    gate: Option<capsule_runtime::SendGate>,
}

async fn infer(state: &mut GatewayState, call: Call, request: &WireRequest) -> InferReply {
    let GatewayState { args: state, ahead, env: last_env } = state;
    let Call { task_id, config, frames, traceparent, gate } = call;
    let started = Instant::now();
    let artifact = state.artifact.name().to_string();
    let sid = &state.session_id;
    let route = match state.routes.route(&artifact) {
        Ok(r) => r,
        Err(why) => {
            return InferReply {
                result: Err(InferenceError::Credential { artifact, why }),
                instantiate_time: Duration::ZERO,
                made_ahead: false,
                call_time: started.elapsed(),
                continuation_id: None,
                upstream: None,
            };
        }
    };
    let mut route = route;
    if let Some(r) = route.as_mut() {
        r.traceparent = traceparent.and_then(|t| http::HeaderValue::from_str(&t).ok());
    }
    let endpoint = route.as_ref().map(|r| r.endpoint.to_string());
    let mut grants = state.grants.clone();
    grants.policy.gateway = route;
    grants.policy.gate = gate;
    // The choice's model and driver config, per call (two choices may share this driver).
    grants.env = CallEnv::of(last_env, &state.grants.env, &request.model, config);
    let coalescer = frames.then(|| Peer::of(sid, role::COALESCER).find::<CoalescerMsg>().ok()).flatten();
    let emitter = frames.then(|| Peer::of(sid, role::EMITTER).find::<EmitterMsg>().ok()).flatten();
    let sink = DriverSink { task_id, emitter, coalescer: coalescer.clone() };
    let input = request.json.clone();
    let outcome = state
        .artifact
        .call_ahead(&state.host, &grants, Arc::new(sink), ToolInput { data: Some(input), log_path: None }, ahead)
        .await;
    let mut continuation_id = None;
    let result = match outcome.result {
        Err(e) => Err(InferenceError::Guest(e)),
        Ok(r) => {
            continuation_id = r.metadata.iter().find(|(k, _)| k == "continuation_id").map(|(_, v)| v.clone());
            let parsed = r.data.as_deref().map(serde_json::from_str::<DriverResponse>);
            match (r.status, parsed) {
                (ToolStatus::Passed, Some(Ok(resp))) if resp.stop_reason != StopReason::Error => Ok(resp),
                (_, Some(Ok(resp))) => Err(InferenceError::Driver {
                    message: resp
                        .error
                        .or(r.summary)
                        .unwrap_or_else(|| "the driver reported an error without a message".into()),
                }),
                (ToolStatus::Passed, Some(Err(source))) => Err(InferenceError::Protocol { artifact, source }),
                (ToolStatus::Passed, None) => {
                    Err(InferenceError::Driver { message: "the driver returned no data".into() })
                }
                (_, _) => Err(InferenceError::Driver {
                    message: r.summary.unwrap_or_else(|| "the driver failed without a message".into()),
                }),
            }
        }
    };
    // The flush frames are with the emitter before the answer (frame order per task). A call
    // that failed completed none of the calls it was writing: they flush nothing.
    let settle = if result.is_ok() { CoalescerMsg::CompleteAll } else { CoalescerMsg::AbandonAll };
    if frames && let Err(e) = Peer::of(sid, role::COALESCER).ask(settle, wait::COALESCE).await {
        tracing::warn!(session = %sid, error = %e, "progress frames were not flushed before the answer");
    }
    // A call that failed because the provider could not be reached says so, naming where.
    let result = match (result, outcome.unreachable) {
        (Err(InferenceError::Driver { .. }), Some((authority, why))) => Err(InferenceError::Unreachable {
            endpoint: endpoint.unwrap_or_else(|| format!("http://{authority}")),
            why,
        }),
        (r, _) => r,
    };
    InferReply {
        result,
        instantiate_time: outcome.instantiate_time,
        made_ahead: outcome.made_ahead,
        call_time: started.elapsed(),
        continuation_id,
        upstream: outcome.upstream,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(env: &[(String, String)]) -> Vec<(&str, &str)> {
        env.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect()
    }

    #[test]
    fn a_call_env_is_rebuilt_only_when_the_choice_changes() {
        let launch: Vec<(String, String)> = [
            ("MURMUR_INFERENCE_ENDPOINT", "http://gw"),
            ("MURMUR_INFERENCE_MODEL", "launch-model"),
            ("MURMUR_INFERENCE_DRIVER_CONFIG", r#"{"tier":"a"}"#),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .into();
        let mut last = None;
        let a = CallEnv::of(&mut last, &launch, "m1", Some("c1".into()));
        assert_eq!(
            pairs(&a),
            [
                ("MURMUR_INFERENCE_ENDPOINT", "http://gw"),
                ("MURMUR_INFERENCE_MODEL", "m1"),
                ("MURMUR_INFERENCE_DRIVER_CONFIG", "c1")
            ]
        );
        // The same choice again: the same environment, not a copy.
        assert!(Arc::ptr_eq(&a, &CallEnv::of(&mut last, &launch, "m1", Some("c1".into()))));
        // Another model, then no config: each seen in the environment.
        let b = CallEnv::of(&mut last, &launch, "m2", Some("c1".into()));
        assert_eq!(pairs(&b)[1], ("MURMUR_INFERENCE_MODEL", "m2"));
        let c = CallEnv::of(&mut last, &launch, "m2", None);
        assert_eq!(pairs(&c), [("MURMUR_INFERENCE_ENDPOINT", "http://gw"), ("MURMUR_INFERENCE_MODEL", "m2")]);
        // Back to the first choice: built again, equal to the first.
        let d = CallEnv::of(&mut last, &launch, "m1", Some("c1".into()));
        assert!(!Arc::ptr_eq(&a, &d));
        assert_eq!(a, d);
    }
}
