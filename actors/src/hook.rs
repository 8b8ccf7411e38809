//! A hook actor: one per `runtime: hook` artifact, under the capsule supervisor like a gateway.
//! It owns the hook's one live instance, so the hook keeps its state from event to event; an
//! instance that failed a call is dropped and the next event gets a fresh one.
//!
//! Blocking hooks are asked ([`HookMsg::Fire`] with a reply) and the loop waits. Async hooks
//! are told (no reply): the mailbox is their ordered queue, bounded by the loop
//! ([`HookQueue`]), and [`HookMsg::Drain`] is answered once everything queued before it ran.
//! A failure is traced here (`hook_error`, `E-RUN-092`) and answered; it never stops the
//! session.

use capsule_protocol::Code;
use capsule_protocol::trace::{TraceEvent, TraceKind};
use capsule_runtime::{Grants, GuestEvents, HookError, HookEvent, HookInstance, HookOutput, Host, LoadedArtifact};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::journal::JournalMsg;
use crate::names::role;
use crate::peer::Peer;

/// Events an async hook may have waiting before new ones are dropped (and traced).
pub const ASYNC_QUEUE: usize = 1024;

/// A hook's deadline for one call, counted in its own time (not time in `run-inference`).
pub const HOOK_DEADLINE_SECS: u64 = 30;

/// What a hook actor is asked.
pub enum HookMsg {
    /// Run one event; `reply` is `None` for an async hook.
    Fire {
        /// The event.
        event: Box<HookEvent>,
        /// Answer (blocking hooks).
        reply: Option<RpcReplyPort<HookAnswer>>,
    },
    /// Answered once every event queued before it has run.
    Drain(RpcReplyPort<()>),
    /// Test hook: panic inside the handler, as a host bug would.
    InjectPanic,
}

/// One hook's answer to one event.
#[derive(Debug)]
pub struct HookAnswer {
    /// The output, or why there is none (already traced).
    pub result: Result<HookOutput, HookError>,
}

/// The events an async hook has waiting, shared by the loop (which counts them in) and the
/// actor (which counts them out).
#[derive(Debug, Clone, Default)]
pub struct HookQueue(Arc<AtomicUsize>);

impl HookQueue {
    /// Take a place in the queue; `false` when it is full.
    pub fn enter(&self) -> bool {
        self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < ASYNC_QUEUE).then_some(n + 1)).is_ok()
    }

    fn leave(&self) {
        let _ = self.0.fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| Some(n.saturating_sub(1)));
    }
}

/// What a hook actor is started (and restarted) with.
#[derive(Clone)]
pub struct HookArgs {
    /// Session id.
    pub session_id: String,
    /// The sandbox host.
    pub host: Host,
    /// The loaded hook.
    pub artifact: LoadedArtifact,
    /// Its grants: no folder, no network, the 30 s deadline.
    pub grants: Grants,
    /// Serves its `run-inference`.
    pub events: Arc<dyn GuestEvents>,
    /// Its queue when async.
    pub queue: HookQueue,
}

/// A declared hook, wired: the loop's route to it and the actor's arguments, sharing one queue.
pub(crate) fn wire(
    a: &crate::launch::ReadyArtifact,
    host: &Host,
    inference: crate::hook_inference::HookInference,
) -> (crate::agent_loop::HookRoute, HookArgs) {
    let queue = HookQueue::default();
    let contract = a.own.as_ref().and_then(|o| o.hook.clone()).unwrap_or_default();
    let route = crate::agent_loop::HookRoute { name: a.decl.name.clone(), contract, queue: queue.clone() };
    let args = HookArgs {
        session_id: inference.session_id.clone(),
        host: host.clone(),
        artifact: a.loaded.clone(),
        grants: a.grants.clone(),
        events: Arc::new(inference),
        queue,
    };
    (route, args)
}

/// The actor's state: its arguments and the live instance.
pub struct HookState {
    args: HookArgs,
    instance: Option<HookInstance>,
}

/// The hook actor.
pub struct Hook;

impl Actor for Hook {
    type Msg = HookMsg;
    type State = HookState;
    type Arguments = HookArgs;

    async fn pre_start(&self, _myself: ActorRef<HookMsg>, args: HookArgs) -> Result<HookState, ActorProcessingErr> {
        Ok(HookState { args, instance: None })
    }

    async fn handle(
        &self,
        _myself: ActorRef<HookMsg>,
        msg: HookMsg,
        state: &mut HookState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HookMsg::Fire { event, reply } => {
                let result = state.fire(&event).await;
                match reply {
                    Some(reply) => {
                        let _ = reply.send(HookAnswer { result });
                    }
                    None => state.args.queue.leave(),
                }
            }
            HookMsg::Drain(reply) => {
                let _ = reply.send(());
            }
            HookMsg::InjectPanic => panic!("hook: injected panic (test hook)"),
        }
        Ok(())
    }
}

impl HookState {
    async fn fire(&mut self, event: &HookEvent) -> Result<HookOutput, HookError> {
        let a = &self.args;
        let instance = match self.instance.take() {
            Some(i) => Ok(i),
            None => a.artifact.instantiate_hook(&a.host, &a.grants, a.events.clone()).await,
        };
        let result = match instance {
            Err(e) => Err(HookError::Call(e)),
            Ok(mut i) => {
                let r = i.call(event).await;
                // An instance that failed a call (trap, deadline, limit) is never called again.
                if !matches!(r, Err(HookError::Call(_))) {
                    self.instance = Some(i);
                }
                r
            }
        };
        if let Err(e) = &result {
            let code = match e {
                HookError::Call(c) => c.code(),
                HookError::Returned { .. } => Code::HookFailed,
            };
            let fields = json!({"hook": a.artifact.name(), "event": event.binding(), "code": Code::HookFailed.as_str(), "cause": code.as_str(), "message": e.to_string()});
            let line = TraceEvent::new(TraceKind::HookError, &a.session_id, crate::now_ms(), fields);
            if let Err(e) = Peer::of(&a.session_id, role::JOURNAL).tell(JournalMsg::Trace(line)) {
                tracing::error!(session = a.session_id, error = %e, "a hook_error line was not written");
            }
        }
        result
    }
}
