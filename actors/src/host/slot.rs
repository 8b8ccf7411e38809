//! [`CapsuleSlot`]: one capsule of a host. It launches the capsule's [`Session`] and door, links
//! the session's supervisor to itself so that the session stopping reaches it as a supervision
//! event, and restarts the capsule by the host's [`RestartPolicy`].
//!
//! Every state change is sent to the host (`HostMsg::Report`) before the request that caused it
//! is answered. A scheduled restart carries the slot's generation; any operator action bumps the
//! generation, so a restart scheduled before it is ignored.
//!
//! Deliberately not here: a running task survives nothing. A host restart is a new session; the
//! task that was running when the session's supervisor gave up ended with it.

use capsule_protocol::Code;
use capsule_protocol::host_file::PlannedCapsule;
use ractor::{Actor, ActorCell, ActorId, ActorProcessingErr, ActorRef, ActorStatus, RpcReplyPort, SupervisionEvent};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::policy::{CrashWindow, RestartPolicy};
use super::supervisor::HostMsg;
use super::{Action, Adopted, CapsuleEntry, CapsuleState, HostError, Shared, chain};
use crate::door::{self, Door, DoorError};
use crate::launch::LaunchOptions;
use crate::session::Session;
use crate::shards::Placement;

/// How long a fixed door port is retried while the previous session's listener lets it go.
const DOOR_REBIND: Duration = Duration::from_secs(2);

/// What a capsule's slot is asked: start, stop or restart it, a scheduled relaunch, its entry.
pub enum SlotMsg {
    /// Launch now, if `generation` is still current and the capsule is starting or crashed (the
    /// first launch and every scheduled restart).
    Launch {
        /// The generation the launch was scheduled in.
        generation: u64,
    },
    /// An operator action; answers the entry after it.
    Act(Action, RpcReplyPort<Result<CapsuleEntry, HostError>>),
    /// The running session (tests, benches).
    Session(RpcReplyPort<Result<Option<Arc<Session>>, HostError>>),
}

/// What a slot is started with.
pub struct SlotArgs {
    /// The capsule.
    pub spec: PlannedCapsule,
    /// What every capsule launches with.
    pub shared: Arc<Shared>,
    /// The restart policy.
    pub policy: RestartPolicy,
    /// Where entries are reported.
    pub host: ActorRef<HostMsg>,
    /// Restarts so far (a slot the host respawned keeps counting).
    pub restarts: u32,
    /// A session this host claimed from a lost host (already running): the slot's first
    /// launch takes it instead of launching a new one.
    pub adopted: Option<Adopted>,
}

/// The running session, its door, and the supervisor whose stop means the session is gone.
struct Running {
    session: Arc<Session>,
    door: Door,
    supervisor: ActorId,
    /// The shard the session runs on, counted there until this is dropped with the rest.
    _placement: Option<Placement>,
}

/// The slot's state: the running session and its door, the capsule's state and restarts.
pub struct SlotState {
    args: SlotArgs,
    state: CapsuleState,
    restarts: u32,
    error: Option<String>,
    session_id: Option<String>,
    running: Option<Running>,
    window: CrashWindow,
    generation: u64,
    /// In a cluster: the running session's entry in the session book, and its revision.
    booked: Option<(String, u64)>,
    /// The slot runs a session claimed from a lost host.
    claimed: bool,
}

/// One capsule of a host: launches its session, watches its supervisor, restarts it by policy.
pub struct CapsuleSlot;

impl SlotState {
    fn entry(&self) -> CapsuleEntry {
        CapsuleEntry {
            name: self.args.spec.name.clone(),
            state: self.state,
            session_id: self.session_id.clone(),
            restarts: self.restarts,
            url: self.running.as_ref().map(|r| r.door.url()),
            error: self.error.clone(),
        }
    }

    fn set(&mut self, state: CapsuleState) {
        self.state = state;
        let _ = self.args.host.cast(HostMsg::Report(self.entry()));
    }

    /// Launch a session and its door. A refusal (a bad manifest or artifact, a credential that
    /// resolves nowhere) cannot succeed on a retry: the capsule is `failed` at once, with its
    /// code. Anything else is treated as a crash.
    async fn launch(&mut self, myself: &ActorRef<SlotMsg>) {
        self.set(CapsuleState::Starting);
        let adopted = self.args.adopted.take();
        // Boxed: a session's launch is a large future (every actor it starts, inline), and
        // unboxed it would size the slot's message loop, which every capsule keeps for its
        // whole life (about 90 KiB each, most of an idle capsule's memory).
        let (spec, shared) = (self.args.spec.clone(), self.args.shared.clone());
        match Box::pin(open_placed(spec, shared, myself.get_cell(), adopted)).await {
            Ok((r, booked)) => {
                self.booked = booked;
                self.session_id = Some(r.session.session_id.clone());
                self.running = Some(r);
                self.set(CapsuleState::Running);
            }
            Err(NotOpened::Refused(why)) => {
                tracing::error!(capsule = %self.args.spec.name, error = %why, "capsule refused at launch; not retrying it");
                self.error = Some(format!("{why} (refused at launch, so not retried: fix it, then start it again)"));
                self.set(CapsuleState::Failed);
            }
            Err(NotOpened::Crashed(why)) => self.crashed(myself, why),
        }
    }

    /// Shut the running session down gracefully and close its door.
    async fn stop_session(&mut self) {
        if let Some(r) = self.running.take() {
            // Boxed for the same reason as the launch.
            Box::pin(r.session.shutdown()).await;
            r.door.close();
        }
        if let Some(unbook) = self.unbook() {
            unbook.await;
        }
    }

    /// Removing the session's entry from the cluster's book, unless another host wrote it
    /// since (it claimed the session).
    fn unbook(&mut self) -> Option<impl Future<Output = ()> + Send + 'static> {
        let (c, (session, revision)) = (self.args.shared.cluster.as_ref()?, self.booked.take()?);
        let book = c.sessions.clone();
        Some(async move {
            if let Err(e) = book.remove(&session, revision).await {
                tracing::debug!(session, error = %e, "the session's book entry was kept (another host wrote it)");
            }
        })
    }

    /// The session is gone (or never came up): schedule a restart, or give up.
    fn crashed(&mut self, myself: &ActorRef<SlotMsg>, why: String) {
        if let Some(r) = self.running.take() {
            r.door.close();
        }
        // A session stopped by the cluster (its lease lost, JetStream gone) stays booked: a host
        // claims it and resumes it once its lease has expired. Any other crash ends it here.
        if why.contains("E-CLU-") {
            self.booked = None;
        } else if let Some(unbook) = self.unbook() {
            tokio::spawn(unbook);
        }
        if self.claimed {
            // A session claimed from a lost host is not replaced by a new session here: its
            // capsule belongs to the host that planned it.
            self.error = Some(format!("{why} (a claimed session is not started again as a new one)"));
            self.set(CapsuleState::Stopped);
            return;
        }
        let name = &self.args.spec.name;
        match self.window.admit(Instant::now(), &self.args.policy) {
            Some(wait) => {
                tracing::warn!(capsule = %name, error = %why, wait_ms = wait.as_millis() as u64, "capsule crashed; restarting");
                self.restarts += 1;
                let generation = self.generation;
                myself.send_after(wait, move || SlotMsg::Launch { generation });
                self.error = Some(why);
                self.set(CapsuleState::Crashed);
            }
            None => {
                let p = &self.args.policy;
                tracing::error!(capsule = %name, error = %why, "capsule crashed more than {} times in {:?}; not restarting it", p.max_restarts, p.period);
                self.error = Some(format!(
                    "{why} (restarted {} times in {:?}; the host gave up — start it again when fixed)",
                    p.max_restarts, p.period
                ));
                self.set(CapsuleState::Failed);
            }
        }
    }

    async fn act(&mut self, myself: &ActorRef<SlotMsg>, action: Action) {
        match action {
            // A slot handles one message at a time and a launch ends in another state, so a
            // slot seen `starting` here has its first launch still queued: launch now (the
            // queued one is then of an old generation and ignored), and answer once launched.
            Action::Start if self.state == CapsuleState::Running => {}
            Action::Start => {
                self.generation += 1;
                self.window.clear();
                self.launch(myself).await;
            }
            Action::Stop => {
                self.generation += 1;
                self.stop_session().await;
                self.set(CapsuleState::Stopped);
            }
            Action::Restart => {
                self.generation += 1;
                self.stop_session().await;
                self.window.clear();
                self.launch(myself).await;
            }
        }
    }
}

/// Why a capsule did not open.
enum NotOpened {
    /// The launch was refused: retrying cannot help.
    Refused(String),
    /// Something failed that a retry may not meet again.
    Crashed(String),
}

impl From<String> for NotOpened {
    fn from(why: String) -> Self {
        NotOpened::Crashed(why)
    }
}

/// [`open`] on one of the host's shards (`crate::shards`), when it has them, so that the
/// session's actors, their tasks and its door run there for the session's life. A session
/// adopted from a lost host already runs on the shard the claimer placed it on.
async fn open_placed(
    spec: PlannedCapsule,
    shared: Arc<Shared>,
    slot: ActorCell,
    adopted: Option<Adopted>,
) -> Result<(Running, Option<(String, u64)>), NotOpened> {
    // `open` boxed on every path: inline, its large future would size this one, which is alive
    // for the whole launch in the slot's thread (see the spawn below).
    let placement = match (&shared.shards, adopted) {
        (_, Some(Adopted { session, placement })) => {
            let (running, booked) = Box::pin(open(&spec, &shared, slot, Some(session))).await?;
            return Ok((Running { _placement: placement, ..running }, booked));
        }
        (None, None) => return Box::pin(open(&spec, &shared, slot, None)).await,
        (Some(shards), None) => shards.place(),
    };
    let index = placement.index();
    // The launch's large future is boxed when the shard first runs it, so it is allocated by
    // the shard's thread, beside the session it starts, and the task spawned from here stays
    // small. Spawned inline, a host launching many capsules at once held every launch's
    // future in the spawning thread's malloc arena until the shards got to it, and the arena
    // kept that memory after it was freed (85 KiB more per idle capsule in `cargo bench
    // --bench host density`).
    let launch = placement.handle().spawn(async move { Box::pin(open(&spec, &shared, slot, None)).await });
    // A launch given up by its slot (the slot stopped mid-way) stops where it is, as it would
    // have on the slot's own runtime.
    let _abort = AbortOnDrop(launch.abort_handle());
    match launch.await {
        Ok(Ok((running, booked))) => {
            // Which shard, for an operator looking into two busy capsules sharing one
            // (`CAPSULE_LOG=capsule_actors=debug`).
            tracing::debug!(session = %running.session.session_id, shard = index, "the session runs on its shard");
            Ok((Running { _placement: Some(placement), ..running }, booked))
        }
        Ok(Err(refused_or_crashed)) => Err(refused_or_crashed),
        Err(ended) => Err(NotOpened::Crashed(format!(
            "{code}: the capsule's launch on shard {index} ended without an answer ({ended})",
            code = Code::ActorCrashed
        ))),
    }
}

/// Aborts a spawned task when dropped.
struct AbortOnDrop(tokio::task::AbortHandle);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Launch the session (or take the `adopted` one), link its supervisor to the slot, enter it in
/// the cluster's session book (clustered), open the door. Returns the running session and its
/// book entry.
async fn open(
    spec: &PlannedCapsule,
    shared: &Shared,
    slot: ActorCell,
    adopted: Option<Arc<Session>>,
) -> Result<(Running, Option<(String, u64)>), NotOpened> {
    let opts = LaunchOptions {
        cluster: shared.cluster.clone(),
        manifest: spec.manifest.clone(),
        workdir: spec.workdir.clone(),
        host: shared.host.clone(),
        env: shared.env.clone(),
        host_config: shared.host_config.clone(),
        machine: shared.machine.clone(),
        endpoint_override: None,
    };
    let session = match adopted {
        Some(s) => s,
        None => Arc::new(Session::launch(opts).await.map_err(|e| {
            let why = chain(&e);
            if e.is_refusal() { NotOpened::Refused(why) } else { NotOpened::Crashed(why) }
        })?),
    };
    let supervisor = session.supervisor_cell();
    supervisor.link(slot);
    if supervisor.get_status() >= ActorStatus::Draining {
        return Err(
            format!("{code}: session {} stopped as it started", session.session_id, code = Code::ActorCrashed).into()
        );
    }
    // Booked before the door opens: any session a client could give a task to can be claimed
    // by a survivor if this host is lost.
    let booked = match &shared.cluster {
        None => None,
        Some(c) => match crate::host::claimer::book(c, spec, &session).await {
            Ok(b) => Some(b),
            Err(e) => {
                session.shutdown().await;
                let bad = e.code() == Code::ClusterBadCapsule;
                return Err(if bad { NotOpened::Refused(chain(&e)) } else { NotOpened::Crashed(chain(&e)) });
            }
        },
    };
    let door = match bind_door(session.clone(), SocketAddr::new(shared.bind, spec.port), shared.tls.clone()).await {
        Ok(d) => d,
        Err(e) => {
            session.shutdown().await;
            // A door refused off loopback (no token) is refused again on every retry.
            let exposed = matches!(e, DoorError::Exposed { .. });
            return Err(if exposed { NotOpened::Refused(chain(&e)) } else { NotOpened::Crashed(chain(&e)) });
        }
    };
    if let Err(e) = session.record_door(&door.url()) {
        tracing::warn!(error = %e, "cannot record the door's address");
    }
    let booked = match (&shared.cluster, booked) {
        (Some(c), Some((mut entry, revision))) => {
            entry.door = Some(door.url());
            let revision = c.sessions.put(&session.session_id, &entry).await.unwrap_or(revision);
            Some((session.session_id.clone(), revision))
        }
        _ => None,
    };
    Ok((Running { supervisor: supervisor.get_id(), session, door, _placement: None }, booked))
}

/// Open the door; a fixed port still held by the previous session's closing listener is
/// retried for [`DOOR_REBIND`].
async fn bind_door(
    session: Arc<Session>,
    addr: SocketAddr,
    tls: Option<tokio_rustls::TlsAcceptor>,
) -> Result<Door, DoorError> {
    let deadline = Instant::now() + DOOR_REBIND;
    loop {
        match door::serve_with(session.clone(), addr, door::DoorOptions { tls: tls.clone() }).await {
            Err(e) if addr.port() != 0 && e.in_use() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

impl Actor for CapsuleSlot {
    type Msg = SlotMsg;
    type State = SlotState;
    type Arguments = SlotArgs;

    async fn pre_start(&self, _myself: ActorRef<SlotMsg>, args: SlotArgs) -> Result<SlotState, ActorProcessingErr> {
        let restarts = args.restarts;
        let claimed = args.adopted.is_some();
        Ok(SlotState {
            args,
            state: CapsuleState::Starting,
            restarts,
            error: None,
            session_id: None,
            running: None,
            window: CrashWindow::default(),
            generation: 0,
            booked: None,
            claimed,
        })
    }

    async fn post_start(&self, myself: ActorRef<SlotMsg>, _state: &mut SlotState) -> Result<(), ActorProcessingErr> {
        // Launch from the mailbox, so spawning a thousand slots does not wait for a thousand
        // launches.
        let _ = myself.cast(SlotMsg::Launch { generation: 0 });
        Ok(())
    }

    async fn handle(
        &self,
        myself: ActorRef<SlotMsg>,
        msg: SlotMsg,
        state: &mut SlotState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SlotMsg::Launch { generation } => {
                if generation == state.generation
                    && matches!(state.state, CapsuleState::Starting | CapsuleState::Crashed)
                {
                    state.launch(&myself).await;
                }
            }
            SlotMsg::Act(action, reply) => {
                state.act(&myself, action).await;
                let _ = reply.send(Ok(state.entry()));
            }
            SlotMsg::Session(reply) => {
                let _ = reply.send(Ok(state.running.as_ref().map(|r| r.session.clone())));
            }
        }
        Ok(())
    }

    async fn handle_supervisor_evt(
        &self,
        myself: ActorRef<SlotMsg>,
        evt: SupervisionEvent,
        state: &mut SlotState,
    ) -> Result<(), ActorProcessingErr> {
        let current = state.running.as_ref().map(|r| r.supervisor);
        let why = match evt {
            SupervisionEvent::ActorTerminated(cell, _, reason) if Some(cell.get_id()) == current => reason
                .unwrap_or_else(|| {
                    format!(
                        "{code}: session {} stopped unexpectedly",
                        state.session_id.as_deref().unwrap_or("?"),
                        code = Code::ActorCrashed
                    )
                }),
            SupervisionEvent::ActorFailed(cell, err) if Some(cell.get_id()) == current => {
                format!("{code}: the session's supervisor failed: {err}", code = Code::ActorCrashed)
            }
            // A session this slot already shut down, or one it gave up on while opening.
            _ => return Ok(()),
        };
        state.crashed(&myself, why);
        Ok(())
    }

    async fn post_stop(&self, _myself: ActorRef<SlotMsg>, state: &mut SlotState) -> Result<(), ActorProcessingErr> {
        state.stop_session().await;
        Ok(())
    }
}
