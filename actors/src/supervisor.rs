//! The capsule supervisor: spawns a session's children, restarts the one that fails with the
//! arguments it was started with, and stops the capsule when failures come faster than
//! [`MAX_RESTARTS`] in [`RESTART_PERIOD`] (so a crash loop is reported, not repeated forever).
//!
//! Restart policy in this version: every child is permanent (restarted on failure); a child
//! that stops normally is not restarted. What a restart restores: the gateway and tools come
//! back from their arguments (they hold no state between calls); the emitter continues the
//! frame-id sequence; the loop comes back empty (a task in flight ends failed for its client).

use capsule_protocol::Code;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use serde_json::json;
use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use crate::agent_loop::{AgentLoop, LoopConfig};
use crate::coalescer::Coalescer;
use crate::credentials::{Credentials, CredentialsArgs};
use crate::emitter::Emitter;
use crate::gateway::{Gateway, GatewayArgs};
use crate::journal::{Journal, JournalArgs, JournalMsg};
use crate::names::{self, role};
use crate::spend::SpendMeter;
use crate::tools::{Tools, ToolsArgs};
use capsule_protocol::trace::{TraceEvent, TraceKind};

/// Restarts allowed within [`RESTART_PERIOD`] before the capsule is stopped.
pub const MAX_RESTARTS: usize = 5;
/// The window for [`MAX_RESTARTS`].
pub const RESTART_PERIOD: Duration = Duration::from_secs(10);

/// The first delayed restart's wait; each later one in the window doubles it.
pub const BACKOFF_BASE: Duration = Duration::from_millis(10);
/// The longest wait before a restart.
pub const BACKOFF_MAX: Duration = Duration::from_millis(500);

/// How a child is restarted (the OTP vocabulary).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestartType {
    /// Always restarted when it fails.
    Permanent,
    /// Restarted when it fails, not when it stops normally.
    Transient,
    /// Never restarted.
    Temporary,
}

/// What a session's supervisor is asked besides its children's supervision events: its restart counts.
pub enum SupervisorMsg {
    /// Restart counts by child role.
    Restarts(RpcReplyPort<HashMap<String, u32>>),
    /// A delayed restart (backoff) is due.
    RestartDue {
        /// The child's role.
        role: String,
        /// Its spec.
        spec: Box<ChildSpec>,
        /// The failure that caused it.
        error: String,
    },
}

impl ChildSpec {
    /// The child's restart type. Every child holding state a session needs is permanent; the
    /// coalescer's state is hints, so it is transient. No child here stops itself normally,
    /// so permanent and transient differ only in intent today.
    pub fn restart_type(&self) -> RestartType {
        match self {
            ChildSpec::Coalescer => RestartType::Transient,
            _ => RestartType::Permanent,
        }
    }
}

/// What a child is started (and restarted) with.
#[derive(Clone)]
pub enum ChildSpec {
    /// The journal.
    Journal(Box<JournalArgs>),
    /// The emitter with its shared id counter and frames file.
    Emitter(Box<crate::emitter::EmitterArgs>),
    /// The coalescer.
    Coalescer,
    /// The credentials table, the choices' drivers and the declared secrets.
    Credentials(Box<CredentialsArgs>),
    /// The spend meter, with its ceiling, the host's meter and the book that survives restarts.
    Spend(Box<crate::spend::SpendArgs>),
    /// A gateway.
    Gateway(Box<GatewayArgs>),
    /// The tools actor.
    Tools(Box<ToolsArgs>),
    /// A hook.
    Hook(Box<crate::hook::HookArgs>),
    /// The lease keeper of a clustered session.
    LeaseKeeper(crate::lease_keeper::KeeperArgs),
    /// The agent loop.
    Loop(Box<LoopConfig>),
}

/// Arguments: the session id and the children in start order.
pub struct SupervisorArgs {
    /// Session id.
    pub session_id: String,
    /// Children, started in this order.
    pub children: Vec<ChildSpec>,
}

/// The supervisor's children (by actor id: their role and how to start them again) and its
/// restart bookkeeping.
pub struct SupervisorState {
    session_id: String,
    children: HashMap<ActorId, (String, ChildSpec)>,
    restarts: HashMap<String, u32>,
    recent: VecDeque<Instant>,
}

/// The root of one session's tree: starts the children in order and restarts one that fails
/// (a crash loop stops the session).
pub struct CapsuleSupervisor;

fn role_of(session_id: &str, spec: &ChildSpec) -> (String, String) {
    let role = match spec {
        ChildSpec::Journal(_) => role::JOURNAL.to_string(),
        ChildSpec::Emitter(_) => role::EMITTER.to_string(),
        ChildSpec::Coalescer => role::COALESCER.to_string(),
        ChildSpec::Credentials(_) => role::CREDENTIALS.to_string(),
        ChildSpec::Spend(_) => role::SPEND.to_string(),
        ChildSpec::Gateway(a) => format!("gateway/{}", a.artifact.name()),
        ChildSpec::Tools(_) => role::TOOLS.to_string(),
        ChildSpec::Hook(a) => format!("hook/{}", a.artifact.name()),
        ChildSpec::LeaseKeeper(_) => "lease".to_string(),
        ChildSpec::Loop(_) => role::LOOP.to_string(),
    };
    let name = names::name(session_id, &role);
    (role, name)
}

async fn spawn_child(session_id: &str, spec: &ChildSpec, sup: ActorCell) -> Result<ActorCell, ractor::SpawnErr> {
    let (_, name) = role_of(session_id, spec);
    let name = Some(name);
    Ok(match spec.clone() {
        ChildSpec::Journal(a) => Actor::spawn_linked(name, Journal, *a, sup).await?.0.get_cell(),
        ChildSpec::Emitter(a) => Actor::spawn_linked(name, Emitter, *a, sup).await?.0.get_cell(),
        ChildSpec::Coalescer => {
            Actor::spawn_linked(name, Coalescer, crate::peer::Peer::of(session_id, role::EMITTER), sup)
                .await?
                .0
                .get_cell()
        }
        ChildSpec::Credentials(a) => Actor::spawn_linked(name, Credentials, *a, sup).await?.0.get_cell(),
        ChildSpec::Spend(a) => Actor::spawn_linked(name, SpendMeter, *a, sup).await?.0.get_cell(),
        ChildSpec::Gateway(a) => Actor::spawn_linked(name, Gateway, *a, sup).await?.0.get_cell(),
        ChildSpec::Tools(a) => Actor::spawn_linked(name, Tools, *a, sup).await?.0.get_cell(),
        ChildSpec::Hook(a) => Actor::spawn_linked(name, crate::hook::Hook, *a, sup).await?.0.get_cell(),
        ChildSpec::LeaseKeeper(a) => {
            Actor::spawn_linked(name, crate::lease_keeper::LeaseKeeper, a, sup).await?.0.get_cell()
        }
        ChildSpec::Loop(a) => Actor::spawn_linked(name, AgentLoop, *a, sup).await?.0.get_cell(),
    })
}

impl Actor for CapsuleSupervisor {
    type Msg = SupervisorMsg;
    type State = SupervisorState;
    type Arguments = SupervisorArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<SupervisorMsg>,
        args: SupervisorArgs,
    ) -> Result<SupervisorState, ActorProcessingErr> {
        let mut children = HashMap::new();
        for spec in args.children {
            let cell = spawn_child(&args.session_id, &spec, myself.get_cell()).await?;
            let (role, _) = role_of(&args.session_id, &spec);
            children.insert(cell.get_id(), (role, spec));
        }
        Ok(SupervisorState { session_id: args.session_id, children, restarts: HashMap::new(), recent: VecDeque::new() })
    }

    async fn handle(
        &self,
        myself: ActorRef<SupervisorMsg>,
        msg: SupervisorMsg,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SupervisorMsg::Restarts(reply) => {
                let _ = reply.send(state.restarts.clone());
            }
            SupervisorMsg::RestartDue { role, spec, error } => restart(&myself, state, role, *spec, error).await?,
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SupervisorMsg>,
        evt: SupervisionEvent,
        state: &mut SupervisorState,
    ) -> Result<(), ActorProcessingErr> {
        match evt {
            SupervisionEvent::ActorFailed(cell, err) => {
                let Some((role, spec)) = state.children.remove(&cell.get_id()) else { return Ok(()) };
                if spec.restart_type() == RestartType::Temporary {
                    return Ok(());
                }
                let now = Instant::now();
                state.recent.push_back(now);
                while state.recent.front().is_some_and(|t| now.duration_since(*t) > RESTART_PERIOD) {
                    state.recent.pop_front();
                }
                if state.recent.len() > MAX_RESTARTS {
                    tracing::error!(session = %state.session_id, %role, "crash loop: more than {MAX_RESTARTS} restarts in {RESTART_PERIOD:?}; stopping the capsule");
                    myself.stop(Some(format!("{code}: crash loop in {role}", code = Code::ActorCrashed)));
                    return Ok(());
                }
                // The first failure in the window restarts at once (restart-to-serving is a
                // benchmark target); later ones back off, doubling, so a crash loop cannot spin.
                let n = state.recent.len() as u32;
                if n <= 1 {
                    restart(&myself, state, role, spec, err.to_string()).await?;
                } else {
                    let delay = (BACKOFF_BASE * 2u32.saturating_pow(n - 2)).min(BACKOFF_MAX);
                    tracing::warn!(session = %state.session_id, %role, ?delay, error = %err, "child failed again; restarting after a backoff");
                    let error = err.to_string();
                    myself.send_after(delay, move || SupervisorMsg::RestartDue { role, spec: Box::new(spec), error });
                }
            }
            SupervisionEvent::ActorTerminated(cell, _, _) => {
                state.children.remove(&cell.get_id());
            }
            _ => {}
        }
        Ok(())
    }
}

async fn restart(
    myself: &ActorRef<SupervisorMsg>,
    state: &mut SupervisorState,
    role: String,
    spec: ChildSpec,
    error: String,
) -> Result<(), ActorProcessingErr> {
    tracing::warn!(session = %state.session_id, %role, %error, "restarting child");
    // Boxed: a child's spawn holds its `pre_start` inline; unboxed it would size this
    // supervisor's message loop for the session's whole life.
    let new = Box::pin(spawn_child(&state.session_id, &spec, myself.get_cell())).await?;
    *state.restarts.entry(role.clone()).or_default() += 1;
    let ev = TraceEvent::new(
        TraceKind::ActorRestarted,
        &state.session_id,
        crate::now_ms(),
        json!({"actor": role, "error": error}),
    );
    if let Err(e) = crate::peer::Peer::of(&state.session_id, role::JOURNAL).tell(JournalMsg::Trace(ev)) {
        tracing::error!(session = %state.session_id, error = %e, "an actor_restarted line was not written");
    }
    state.children.insert(new.get_id(), (role, spec));
    Ok(())
}
