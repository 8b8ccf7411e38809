//! [`HostSupervisor`]: one per `capsule host` process. It spawns one [`CapsuleSlot`] per capsule
//! (linked), keeps the table of their entries (each slot reports every change), answers `List`
//! from that table, forwards operator actions to the slot (which answers the caller directly,
//! so a slow launch holds up only its own capsule), and shuts every capsule down on `Shutdown`.
//!
//! A slot actor that fails (a bug, not a capsule crash: those are handled inside the slot) is
//! spawned again with its restart count, under the same intensity limit as a capsule; past it,
//! the capsule is `failed` until it is started again.

use capsule_protocol::Code;
use capsule_protocol::host_file::PlannedCapsule;
use ractor::{Actor, ActorId, ActorProcessingErr, ActorRef, RpcReplyPort, SupervisionEvent};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::claimer::{Claimer, ClaimerArgs, ClaimerMsg};
use super::policy::{CrashWindow, RestartPolicy};
use super::slot::{CapsuleSlot, SlotArgs, SlotMsg};
use super::{Action, Adopted, CapsuleEntry, CapsuleState, HostError, Shared};
use crate::session::Session;

/// How long one capsule's graceful stop may take during `Shutdown` (the loop's `EndSession`,
/// the emitter's close and the tree's stop are bounded by 30 + 5 + 10 s).
const STOP_TIMEOUT: Duration = Duration::from_secs(50);

/// What the host supervisor is asked: list, act on a capsule, take a slot's report, shut down.
pub enum HostMsg {
    /// Every capsule's entry, in start order.
    List(RpcReplyPort<Vec<CapsuleEntry>>),
    /// Answers (the entries) once no capsule is `starting`.
    Settled(RpcReplyPort<Vec<CapsuleEntry>>),
    /// Start, stop or restart the named capsule; answers the entry after the action.
    Act {
        /// The capsule.
        name: String,
        /// What to do.
        action: Action,
        /// The entry after the action, or why not.
        reply: RpcReplyPort<Result<CapsuleEntry, HostError>>,
    },
    /// The running session of the named capsule (tests, benches).
    Session {
        /// The capsule.
        name: String,
        /// The session while running.
        reply: RpcReplyPort<Result<Option<Arc<Session>>, HostError>>,
    },
    /// Stop every capsule gracefully, then every slot; answers the final entries.
    Shutdown(RpcReplyPort<Vec<CapsuleEntry>>),
    /// A slot's entry changed.
    Report(CapsuleEntry),
    /// A session this host claimed from a lost host (clustered): run it in a new slot. Its name
    /// is the capsule's, or `<capsule>~<session>` when this host already has one so named.
    Adopt {
        /// The capsule (fetched from the cluster's store).
        spec: PlannedCapsule,
        /// The resumed session and its shard.
        adopted: Adopted,
    },
    /// Run a capsule placed on this host (clustered): a new slot, answered with its entry once
    /// its session runs. Named like `Adopt` when the name is taken.
    Place {
        /// The capsule (fetched from the cluster's store).
        spec: PlannedCapsule,
        /// The entry once launched, or why not.
        reply: RpcReplyPort<Result<CapsuleEntry, HostError>>,
    },
}

/// What the host is started with.
pub struct HostArgs {
    /// The capsules, in start order.
    pub capsules: Vec<PlannedCapsule>,
    /// What every capsule launches with.
    pub shared: Shared,
    /// The restart policy of every capsule.
    pub policy: RestartPolicy,
}

/// One capsule in the host's table.
struct Slot {
    spec: PlannedCapsule,
    actor: Option<ActorRef<SlotMsg>>,
    entry: CapsuleEntry,
    slot_failures: CrashWindow,
    /// A claimed session, taken by the slot's first launch.
    adopted: Option<Adopted>,
}

/// The host's state: its slots and the last report of each.
pub struct HostState {
    slots: Vec<Slot>,
    index: HashMap<String, usize>,
    by_actor: HashMap<ActorId, usize>,
    shared: Arc<Shared>,
    policy: RestartPolicy,
    waiters: Vec<RpcReplyPort<Vec<CapsuleEntry>>>,
    shutting_down: bool,
    /// The claimer (clustered hosts).
    claimer: Option<ActorRef<ClaimerMsg>>,
}

/// The root of a multi-capsule host: one slot per capsule.
pub struct HostSupervisor;

impl HostState {
    fn entries(&self) -> Vec<CapsuleEntry> {
        self.slots.iter().map(|s| s.entry.clone()).collect()
    }

    fn answer_waiters(&mut self) {
        if self.waiters.is_empty() || self.slots.iter().any(|s| s.entry.state == CapsuleState::Starting) {
            return;
        }
        let entries = self.entries();
        for w in self.waiters.drain(..) {
            let _ = w.send(entries.clone());
        }
    }

    async fn spawn_slot(
        &mut self,
        myself: &ActorRef<HostMsg>,
        i: usize,
    ) -> Result<ActorRef<SlotMsg>, ractor::SpawnErr> {
        let slot = &mut self.slots[i];
        let args = SlotArgs {
            spec: slot.spec.clone(),
            shared: self.shared.clone(),
            policy: self.policy,
            host: myself.clone(),
            restarts: slot.entry.restarts,
            adopted: slot.adopted.take(),
        };
        let (actor, _) = Actor::spawn_linked(None, CapsuleSlot, args, myself.get_cell()).await?;
        slot.entry.state = CapsuleState::Starting;
        slot.actor = Some(actor.clone());
        self.by_actor.insert(actor.get_id(), i);
        Ok(actor)
    }

    /// Add a slot for `spec` (renamed `<name>~<tag>` when the name is taken) and spawn it.
    async fn add_slot(
        &mut self,
        myself: &ActorRef<HostMsg>,
        mut spec: PlannedCapsule,
        tag: &str,
        adopted: Option<Adopted>,
    ) -> Result<ActorRef<SlotMsg>, ractor::SpawnErr> {
        if self.index.contains_key(&spec.name) {
            spec.name = format!("{}~{tag}", spec.name);
        }
        let entry = CapsuleEntry {
            name: spec.name.clone(),
            state: CapsuleState::Starting,
            session_id: adopted.as_ref().map(|a| a.session.session_id.clone()),
            restarts: 0,
            url: None,
            error: None,
        };
        let i = self.slots.len();
        self.index.insert(spec.name.clone(), i);
        self.slots.push(Slot { spec, actor: None, entry, slot_failures: CrashWindow::default(), adopted });
        self.spawn_slot(myself, i).await
    }

    /// Start the claimer when this host is clustered.
    async fn spawn_claimer(&mut self, myself: &ActorRef<HostMsg>) -> Result<(), ractor::SpawnErr> {
        if self.shared.cluster.is_some() {
            let args = ClaimerArgs { shared: self.shared.clone(), host: myself.clone() };
            let (actor, _) = Actor::spawn_linked(None, Claimer, args, myself.get_cell()).await?;
            self.claimer = Some(actor);
        }
        Ok(())
    }

    /// The slot actor of `name` and the action it should take. A slot that is gone is spawned
    /// again when the action wants the capsule running (it launches on its own, so the action
    /// becomes `Start`: answer once launched); for `Stop` there is nothing to do (`None`).
    async fn slot_for(
        &mut self,
        myself: &ActorRef<HostMsg>,
        name: &str,
        action: Action,
    ) -> Result<Option<(ActorRef<SlotMsg>, Action)>, HostError> {
        if self.shutting_down {
            return Err(HostError::ShuttingDown);
        }
        let i = *self.index.get(name).ok_or_else(|| HostError::UnknownCapsule(name.to_string()))?;
        if let Some(a) = &self.slots[i].actor {
            return Ok(Some((a.clone(), action)));
        }
        if action == Action::Stop {
            return Ok(None);
        }
        self.slots[i].slot_failures.clear();
        let actor = self.spawn_slot(myself, i).await.map_err(|_| HostError::Unavailable)?;
        Ok(Some((actor, Action::Start)))
    }

    async fn shutdown(&mut self) {
        self.shutting_down = true;
        if let Some(c) = self.claimer.take() {
            let _ = c.stop_and_wait(None, Some(STOP_TIMEOUT)).await;
        }
        let actors: Vec<(usize, ActorRef<SlotMsg>)> =
            self.slots.iter().enumerate().filter_map(|(i, s)| s.actor.clone().map(|a| (i, a))).collect();
        let stops = actors.iter().map(|(_, a)| a.call(|r| SlotMsg::Act(Action::Stop, r), Some(STOP_TIMEOUT)));
        let results = futures::future::join_all(stops).await;
        for ((i, _), r) in actors.iter().zip(results) {
            if let Ok(ractor::rpc::CallResult::Success(Ok(entry))) = r {
                self.slots[*i].entry = entry;
            } else {
                tracing::warn!(capsule = %self.slots[*i].entry.name, "capsule did not stop within {STOP_TIMEOUT:?}");
            }
        }
        let stopping = actors.iter().map(|(_, a)| a.stop_and_wait(None, Some(STOP_TIMEOUT)));
        futures::future::join_all(stopping).await;
        for s in &mut self.slots {
            s.actor = None;
        }
        self.by_actor.clear();
    }
}

impl Actor for HostSupervisor {
    type Msg = HostMsg;
    type State = HostState;
    type Arguments = HostArgs;

    async fn pre_start(&self, myself: ActorRef<HostMsg>, args: HostArgs) -> Result<HostState, ActorProcessingErr> {
        let slots = args
            .capsules
            .into_iter()
            .map(|spec| {
                let entry = CapsuleEntry {
                    name: spec.name.clone(),
                    state: CapsuleState::Starting,
                    session_id: None,
                    restarts: 0,
                    url: None,
                    error: None,
                };
                Slot { spec, actor: None, entry, slot_failures: CrashWindow::default(), adopted: None }
            })
            .collect::<Vec<_>>();
        let index = slots.iter().enumerate().map(|(i, s)| (s.spec.name.clone(), i)).collect();
        let mut state = HostState {
            slots,
            index,
            by_actor: HashMap::new(),
            shared: Arc::new(args.shared),
            policy: args.policy,
            waiters: Vec::new(),
            shutting_down: false,
            claimer: None,
        };
        for i in 0..state.slots.len() {
            state.spawn_slot(&myself, i).await?;
        }
        state.spawn_claimer(&myself).await?;
        if let Some(c) = &state.shared.cluster
            && let Err(e) = super::placement::listen(c.clone(), myself.clone()).await
        {
            tracing::error!(error = %e, "this host does not take placements");
        }
        Ok(state)
    }

    async fn handle(
        &self,
        myself: ActorRef<HostMsg>,
        msg: HostMsg,
        state: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HostMsg::List(reply) => {
                let _ = reply.send(state.entries());
            }
            HostMsg::Settled(reply) => {
                state.waiters.push(reply);
                state.answer_waiters();
            }
            HostMsg::Report(entry) => {
                if let Some(&i) = state.index.get(&entry.name) {
                    state.slots[i].entry = entry;
                }
                state.answer_waiters();
            }
            HostMsg::Act { name, action, reply } => match state.slot_for(&myself, &name, action).await {
                Ok(Some((slot, action))) => {
                    // The slot answers the caller itself; if it is gone, the caller's port is
                    // dropped and the call ends with an error.
                    let _ = slot.cast(SlotMsg::Act(action, reply));
                }
                Ok(None) => {
                    let entry = state.index.get(&name).map(|&i| state.slots[i].entry.clone());
                    let _ = reply.send(entry.ok_or(HostError::UnknownCapsule(name)));
                }
                Err(e) => {
                    let _ = reply.send(Err(e));
                }
            },
            HostMsg::Session { name, reply } => match state.index.get(&name).map(|&i| state.slots[i].actor.clone()) {
                None => {
                    let _ = reply.send(Err(HostError::UnknownCapsule(name)));
                }
                Some(None) => {
                    let _ = reply.send(Ok(None));
                }
                Some(Some(slot)) => {
                    // Answered by the slot, so a slot busy launching holds up only its caller.
                    let _ = slot.cast(SlotMsg::Session(reply));
                }
            },
            HostMsg::Adopt { spec, adopted } => {
                if state.shutting_down {
                    adopted.session.shutdown().await;
                    return Ok(());
                }
                let tag = adopted.session.session_id.trim_start_matches("ses_").chars().take(12).collect::<String>();
                state.add_slot(&myself, spec, &tag, Some(adopted)).await?;
            }
            HostMsg::Place { spec, reply } => {
                if state.shutting_down {
                    let _ = reply.send(Err(HostError::ShuttingDown));
                    return Ok(());
                }
                let tag = uuid::Uuid::now_v7().simple().to_string().chars().rev().take(8).collect::<String>();
                let slot = state.add_slot(&myself, spec, &tag, None).await?;
                // The slot launches first (its own `Launch`, already queued), then answers.
                let _ = slot.cast(SlotMsg::Act(Action::Start, reply));
            }
            HostMsg::Shutdown(reply) => {
                state.shutdown().await;
                let entries = state.entries();
                for w in state.waiters.drain(..) {
                    let _ = w.send(entries.clone());
                }
                let _ = reply.send(entries);
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<HostMsg>,
        evt: SupervisionEvent,
        state: &mut HostState,
    ) -> Result<(), ActorProcessingErr> {
        let (cell, failure) = match evt {
            SupervisionEvent::ActorFailed(cell, err) => (cell, Some(err.to_string())),
            SupervisionEvent::ActorTerminated(cell, _, _) => (cell, None),
            _ => return Ok(()),
        };
        if state.claimer.as_ref().is_some_and(|c| c.get_id() == cell.get_id()) {
            state.claimer = None;
            if failure.is_some() && !state.shutting_down {
                tracing::error!(
                    error = failure.as_deref().unwrap_or_default(),
                    "the claimer failed; starting it again"
                );
                state.spawn_claimer(&myself).await?;
            }
            return Ok(());
        }
        let Some(i) = state.by_actor.remove(&cell.get_id()) else { return Ok(()) };
        state.slots[i].actor = None;
        let Some(err) = failure else { return Ok(()) };
        let name = state.slots[i].entry.name.clone();
        let why = format!("{code}: the host's slot for capsule `{name}` failed: {err}", code = Code::ActorCrashed);
        if state.shutting_down {
            return Ok(());
        }
        if state.slots[i].slot_failures.admit(Instant::now(), &state.policy).is_some() {
            tracing::error!(capsule = %name, error = %err, "capsule slot failed; spawning it again");
            state.slots[i].entry.restarts += 1;
            state.slots[i].entry.error = Some(why);
            state.spawn_slot(&myself, i).await?;
        } else {
            tracing::error!(capsule = %name, error = %err, "capsule slot failed too often; the capsule is failed");
            let e = &mut state.slots[i].entry;
            (e.state, e.url, e.error) = (CapsuleState::Failed, None, Some(why));
            state.answer_waiters();
        }
        Ok(())
    }
}
