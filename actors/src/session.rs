//! [`Session`]: the handle to one running capsule session, for the CLI, a door or a test.
//!
//! `launch` prepares everything (refusing bad input with a coded error), creates
//! `<workdir>/<session id>/` with `out/`, `trace.jsonl` and `conversation.jsonl`, starts the
//! supervision tree and writes `session_start`. `submit` runs a task to its end; `subscribe`
//! streams frames; `shutdown` writes `session_end` and stops the tree.

use capsule_protocol::frame::SharedFrame;
use capsule_protocol::manifest::ArtifactRuntime;
use capsule_protocol::trace::{TraceEvent, TraceKind};
use ractor::{Actor, ActorRef};
use serde_json::json;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;
use tokio::sync::{mpsc, oneshot};

use capsule_runtime::Beneath;

use crate::agent_loop::{LoopConfig, LoopMsg, Origin, TaskOutcome, TaskRecord, TaskRequest};
use crate::credentials::CredentialsMsg;
use crate::emitter::EmitterMsg;
use crate::error::LaunchError;
use crate::gateway::{GatewayArgs, GatewayMsg};
use crate::journal::{JournalArgs, JournalMsg};
use crate::launch::{LaunchOptions, prepare, tool_specs};
use crate::names::{self, role};
use crate::peer::{Peer, PeerError, wait};
use crate::supervisor::{CapsuleSupervisor, ChildSpec, SupervisorArgs, SupervisorMsg};
use crate::tools::{ToolEntry, ToolsArgs, ToolsMsg};
use capsule_protocol::Code;

pub use crate::session_tokens::{ControlHandle, DOOR_TOKEN_FILE, DoorAuth, KeptKeys};

/// Why a session call failed.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// An actor of the session did not answer: not running (restarting or stopped), stopped
    /// before answering, or too slow.
    #[error("{code}: {0}", code = Code::ActorCrashed)]
    Peer(#[from] crate::peer::PeerError),
}

/// Control refusals traced in full per second; more are only counted (a flood of bad requests
/// must not fill the disk through the trace).
pub const REFUSALS_TRACED_PER_SECOND: u32 = 20;

/// The refusal trace budget: the current one-second window, refusals traced in it, and
/// refusals counted but not traced since the last traced one.
#[derive(Debug, Default)]
struct RefusalWindow {
    start_ms: u64,
    traced: u32,
    suppressed: u64,
}

/// The file in a session folder that holds the door's address.
pub const DOOR_URL_FILE: &str = "door.url";

/// A running session.
pub struct Session {
    /// `ses_<uuidv7 hex>`.
    pub session_id: String,
    /// The session folder.
    pub dir: PathBuf,
    /// The capsule's folder (holds the session folders and `files/`).
    pub workdir: PathBuf,
    /// The tools' workdir (`<workdir>/files`).
    pub files: PathBuf,
    /// Launch warnings (already in the trace).
    pub warnings: Vec<capsule_protocol::Diagnostic>,
    /// The capsule manifest (for the agent card and lifecycle).
    pub manifest: Arc<capsule_protocol::Manifest>,
    /// The control surface, when `control.settings` or `control.secrets` is non-empty.
    pub control: Option<ControlHandle>,
    /// The door's bearer token (`network.authentication: bearer`), when on.
    pub door_auth: Option<DoorAuth>,
    supervisor: ActorRef<SupervisorMsg>,
    refusals: std::sync::Mutex<RefusalWindow>,
}

impl Session {
    /// This session's actor with `role`.
    pub(crate) fn peer(&self, role: &'static str) -> Peer {
        Peer::of(&self.session_id, role)
    }

    /// Prepare and start a session.
    pub async fn launch(opts: LaunchOptions) -> Result<Session, LaunchError> {
        Self::start(opts, None, None, None, KeptKeys::default()).await
    }

    /// Answer once every trace line sent before is written and synced (the journal's mailbox
    /// is FIFO); `None` when the journal is not running.
    pub async fn flush_journal(&self) -> Option<u64> {
        self.peer(role::JOURNAL).ask(JournalMsg::Flush, wait::JOURNAL).await.ok()
    }

    /// Whether a refusal may be traced now: `Some(n)` with the refusals counted but not traced
    /// since the last traced one, or `None` when this second's budget is spent (it is counted).
    pub fn refusal_budget(&self) -> Option<u64> {
        let mut w = self.refusals.lock().unwrap_or_else(|p| p.into_inner());
        let now = crate::now_ms();
        if now.saturating_sub(w.start_ms) >= 1000 {
            w.start_ms = now;
            w.traced = 0;
        }
        if w.traced >= REFUSALS_TRACED_PER_SECOND {
            w.suppressed += 1;
            return None;
        }
        w.traced += 1;
        Some(std::mem::take(&mut w.suppressed))
    }

    /// Record the door's address in `door.url` (`0600`, in the session folder, which no tool's
    /// scope reaches; never written through a link). `capsule control` reads it from there.
    pub fn record_door(&self, url: &str) -> Result<(), capsule_runtime::BeneathError> {
        Beneath::open(&self.dir)?.write(DOOR_URL_FILE, url.as_bytes())
    }

    /// Continue the task a resumed session was running, then the tasks that were queued
    /// behind it; their outcomes in that order (empty when there were none).
    pub async fn resume_task(&self) -> Result<Vec<TaskOutcome>, SessionError> {
        // No timeout: it answers when the recovered tasks ended.
        Ok(self.peer(role::LOOP).ask(LoopMsg::Resume, wait::UNTIL_DONE).await?)
    }

    /// Start the session's tree. In a cluster the session's lease is taken first (unless the
    /// caller already holds it: `lease`), before anything is loaded or runs.
    pub(crate) async fn start(
        opts: LaunchOptions,
        resumed_id: Option<String>,
        resume: Option<crate::agent_loop::ResumeSeed>,
        lease: Option<crate::cluster::Lease>,
        kept: KeptKeys,
    ) -> Result<Session, LaunchError> {
        let session_id = resumed_id.clone().unwrap_or_else(|| format!("ses_{}", uuid::Uuid::now_v7().simple()));
        let lease = match (&opts.cluster, lease) {
            (Some(c), None) => Some(c.leases.acquire(&session_id, &c.name).await?),
            (_, lease) => lease,
        };
        // Build the cl100k encoder (process-wide, once) while the components load, so the
        // first call's admission does not wait for it.
        std::thread::spawn(crate::spend::tokens::warm_up);
        let prepared = prepare(&opts, &session_id)?;
        let dir = prepared.workdir.join(&session_id);
        let out_dir = dir.join("out");
        Beneath::open(&prepared.workdir)
            .and_then(|w| w.into_dir(&format!("{session_id}/out"), true))
            .map_err(LaunchError::Files)?;
        let m = &prepared.manifest;
        let (choices, choice_warnings) = crate::choices::resolve(m);
        let mut warnings = prepared.warnings.clone();
        warnings.extend(choice_warnings);
        let (control, door_auth) = crate::session_tokens::tokens(m, &dir, kept)?;
        let agent_switch = m.control.agent_settings.iter().any(|s| s == "inference.driver");
        let mut tools = tool_specs(&prepared);
        if agent_switch {
            tools.push(crate::choices::switch_tool(&choices));
        }
        let driver = m.inference.driver.artifact.clone();
        let deadline = prepared
            .artifacts
            .iter()
            .find(|a| a.decl.name == driver)
            .map(|a| a.grants.limits.deadline_seconds)
            .unwrap_or(600);
        let first_frame_id = resume.as_ref().map_or(1, |r| r.next_frame_id.max(1));
        let credentials_book = crate::credentials::CredentialsBook::new(prepared.credentials.clone());
        let telemetry = match &m.observability.otel_endpoint {
            None => None,
            Some(e) => Some(crate::otel::Telemetry::start(e, &m.name, &m.version, &session_id).await.map_err(|e| {
                capsule_protocol::Diagnostic::new(
                    Code::ManifestInvalid,
                    "observability.otel_endpoint",
                    format!("{e}: {}", e.source),
                    "write the collector's OTLP/HTTP base URL, e.g. http://127.0.0.1:4318",
                )
            })?),
        };
        let mut loop_config = LoopConfig {
            session_id: session_id.clone(),
            capsule_name: m.name.clone(),
            capsule_version: m.version.clone(),
            max_turns: m.inference.max_turns,
            max_retries: m.inference.max_retries,
            system: prepared.system.clone(),
            tools,
            out_dir,
            choices: choices.clone().into(),
            choice_in_use: credentials_book.choice_in_use(),
            cap: Default::default(),
            stamp_producers: !m.inference.alternates.is_empty(),
            control_settings: m.control.settings.clone(),
            token_id: control.as_ref().map(|c| c.key.id()),
            agent_switch,
            conversation_path: Some(dir.join("conversation.jsonl")),
            cluster_conversation: opts.cluster.as_ref().map(|c| (c.js.clone(), session_id.clone())),
            resume,
            call_timeout: Duration::from_secs(deadline + 30),
            acceptance: m.lifecycle.task_acceptance,
            queue_depth: m.lifecycle.queue_depth as usize,
            input_timeout: m.lifecycle.input_timeout_secs.map(Duration::from_secs),
            hooks: Vec::new(),
            max_task_reopens: m.inference.max_task_reopens,
            compaction: crate::agent_loop::CompactionConfig {
                threshold: m.inference.compaction.threshold,
                window: m.context.max_tokens,
                model: m.inference.compaction.model.clone(),
                system_prompt: prepared.compaction_prompt.clone(),
            },
            session_hooks: Default::default(),
            started: std::time::Instant::now(),
            telemetry,
        };
        let mut children = vec![
            ChildSpec::Journal(Box::new(JournalArgs {
                trace_path: dir.join("trace.jsonl"),
                conversation_path: dir.join("conversation.jsonl"),
                cluster: opts.cluster.as_ref().map(|c| crate::journal::ClusterJournal {
                    js: c.js.clone(),
                    session: session_id.clone(),
                    trace_last: Arc::new(AtomicU64::new(u64::MAX)),
                    conversation_last: Arc::new(AtomicU64::new(u64::MAX)),
                }),
            })),
            ChildSpec::Emitter(Box::new(crate::emitter::EmitterArgs {
                next_id: Arc::new(AtomicU64::new(first_frame_id)),
                frames_path: Some(dir.join("frames.jsonl")),
                cluster: opts.cluster.as_ref().map(|c| (c.js.clone(), session_id.clone())),
            })),
            ChildSpec::Coalescer,
            ChildSpec::Credentials(Box::new(crate::credentials::CredentialsArgs {
                choices: choices.iter().map(|c| c.driver.clone()).collect(),
                secrets: m.control.secrets.clone(),
                book: credentials_book.clone(),
            })),
            ChildSpec::Spend(Box::new(crate::spend::SpendArgs {
                journal: Some(dir.join("spend.jsonl")),
                ..crate::spend::SpendArgs::new(session_id.clone(), m.inference.max_session_tokens, opts.machine.clone())
            })),
        ];
        let mut tools = HashMap::new();
        // The session's waits for its provider: its gateways tell them, its tools use them.
        let waits = capsule_runtime::Waits::default();
        for a in &prepared.artifacts {
            match a.decl.runtime {
                ArtifactRuntime::Driver => children.push(ChildSpec::Gateway(Box::new(GatewayArgs {
                    session_id: session_id.clone(),
                    host: opts.host.clone(),
                    artifact: a.loaded.clone(),
                    grants: a.grants.clone(),
                    routes: credentials_book.routes(),
                    waits: waits.clone(),
                }))),
                ArtifactRuntime::Tool => {
                    tools.insert(
                        a.decl.name.clone(),
                        ToolEntry { artifact: a.loaded.clone(), grants: a.grants.clone() },
                    );
                }
                ArtifactRuntime::Hook => {
                    let inference = crate::hook_inference::HookInference {
                        session_id: session_id.clone(),
                        hook: a.decl.name.clone(),
                        primary: choices[0].clone(),
                        timeout: loop_config.call_timeout,
                        max_retries: m.inference.max_retries,
                    };
                    let (route, args) = crate::hook::wire(a, &opts.host, inference);
                    loop_config.hooks.push(route);
                    children.push(ChildSpec::Hook(Box::new(args)));
                }
            }
        }
        children.push(ChildSpec::Tools(Box::new(ToolsArgs { host: opts.host.clone(), tools, waits })));
        children.push(ChildSpec::Loop(Box::new(loop_config)));
        let mut leased = None;
        if let (Some(c), Some(lease)) = (&opts.cluster, lease) {
            // The keeper is the first child, so the session stops when the lease is lost.
            let (keeper, fields) = crate::lease_keeper::KeeperArgs::new(c, &session_id, lease);
            leased = Some(fields);
            children.insert(0, ChildSpec::LeaseKeeper(keeper));
        }
        let (supervisor, _) = Actor::spawn(
            Some(names::name(&session_id, role::SUPERVISOR)),
            CapsuleSupervisor,
            SupervisorArgs { session_id: session_id.clone(), children },
        )
        .await
        .map_err(|source| LaunchError::Spawn { role: role::SUPERVISOR.into(), source })?;
        let session = Session {
            session_id: session_id.clone(),
            dir,
            workdir: prepared.workdir.clone(),
            files: prepared.files.clone(),
            warnings: warnings.clone(),
            manifest: Arc::new(prepared.manifest.clone()),
            control,
            door_auth,
            supervisor,
            refusals: Default::default(),
        };
        let start = crate::session_start::fields(&crate::session_start::Launched {
            prepared: &prepared,
            opts: &opts,
            choices: &choices,
            driver: &driver,
            resumed: resumed_id.is_some(),
            cluster: leased,
            session: &session,
        });
        session.trace(TraceKind::SessionStart, start);
        for w in &warnings {
            session
                .trace(TraceKind::Warning, json!({"code": w.code.as_str(), "at": w.at, "rule": w.rule, "fix": w.fix}));
        }
        Ok(session)
    }

    pub(crate) fn trace(&self, kind: TraceKind, fields: serde_json::Value) {
        let event = TraceEvent::new(kind, &self.session_id, crate::now_ms(), fields);
        if let Err(e) = self.peer(role::JOURNAL).tell(JournalMsg::Trace(event)) {
            tracing::error!(session = self.session_id, error = %e, kind = kind.as_str(), "a trace line was not written");
        }
    }

    /// Submit the launch task and wait for it to end.
    pub async fn submit(&self, text: &str) -> Result<TaskOutcome, SessionError> {
        let text = text.to_string();
        let submit = |reply| LoopMsg::Submit {
            request: TaskRequest { text, context_id: None, origin: Origin::Launch, traceparent: None },
            accepted: None,
            reply: Some(reply),
        };
        Ok(self.peer(role::LOOP).ask(submit, wait::UNTIL_DONE).await?)
    }

    /// Submit a task from a door client: answers as soon as it is accepted, queued or
    /// rejected; the returned receiver answers when it ends.
    pub async fn submit_from_door(
        &self,
        text: &str,
        context_id: Option<String>,
        traceparent: Option<String>,
    ) -> Result<(TaskRecord, oneshot::Receiver<TaskOutcome>), SessionError> {
        let loop_peer = self.peer(role::LOOP);
        let (acc_tx, acc_rx) = oneshot::channel();
        let (done_tx, done_rx) = oneshot::channel();
        let port: ractor::RpcReplyPort<TaskOutcome> = done_tx.into();
        loop_peer.tell(LoopMsg::Submit {
            request: TaskRequest { text: text.to_string(), context_id, origin: Origin::Door, traceparent },
            accepted: Some(acc_tx),
            reply: Some(port),
        })?;
        let record = acc_rx.await.map_err(|_| PeerError::Dropped { role: role::LOOP })?;
        Ok((record, done_rx))
    }

    /// A task's record.
    pub async fn get_task(&self, id: &str) -> Result<Option<TaskRecord>, SessionError> {
        let id = id.to_string();
        Ok(self.peer(role::LOOP).ask(|reply| LoopMsg::GetTask { id, reply }, wait::CONTROL).await?)
    }

    /// Answer a task waiting for input (`input-required`): `None` for an unknown task.
    pub async fn provide_input(
        &self,
        task_id: &str,
        text: &str,
    ) -> Result<Option<Result<TaskRecord, crate::agent_loop::InputRefusal>>, SessionError> {
        let (task_id, text) = (task_id.to_string(), text.to_string());
        Ok(self.peer(role::LOOP).ask(|reply| LoopMsg::ProvideInput { task_id, text, reply }, wait::JOURNAL).await?)
    }

    /// The running task's id when it waits for a person.
    pub async fn waiting_task(&self) -> Result<Option<String>, SessionError> {
        Ok(self.peer(role::LOOP).ask(LoopMsg::Waiting, wait::CONTROL).await?)
    }

    /// Every task of this session, newest first.
    pub async fn list_tasks(&self) -> Result<Vec<TaskRecord>, SessionError> {
        Ok(self.peer(role::LOOP).ask(LoopMsg::ListTasks, wait::CONTROL).await?)
    }

    /// The id of the last frame emitted so far (0 before the first).
    pub async fn last_frame_id(&self) -> Result<u64, SessionError> {
        Ok(self.peer(role::EMITTER).ask(EmitterMsg::LastId, wait::CONTROL).await?)
    }

    /// Cancel a task.
    pub async fn cancel(&self, id: &str) -> Result<Option<TaskRecord>, SessionError> {
        let id = id.to_string();
        Ok(self.peer(role::LOOP).ask(|reply| LoopMsg::Cancel { id, reply }, wait::JOURNAL).await?)
    }

    /// Subscribe to frames (after a `Last-Event-ID` when given).
    pub async fn subscribe(&self, after: Option<u64>) -> Option<mpsc::Receiver<SharedFrame>> {
        self.peer(role::EMITTER).ask(|reply| EmitterMsg::Subscribe { after, reply }, wait::CONTROL).await.ok()
    }

    /// Restart counts by child role.
    pub async fn restarts(&self) -> HashMap<String, u32> {
        match self.supervisor.call(SupervisorMsg::Restarts, Some(Duration::from_secs(5))).await {
            Ok(ractor::rpc::CallResult::Success(r)) => r,
            _ => HashMap::new(),
        }
    }

    /// The session's supervisor (`<session>/supervisor`), for a host that links it to learn when
    /// the session stops (a crash loop stops it with an `E-RUN-050: crash loop in …` reason).
    pub fn supervisor_cell(&self) -> ractor::ActorCell {
        self.supervisor.get_cell()
    }

    /// Wait until the session's supervisor has stopped (after [`Session::shutdown`] or a crash
    /// loop).
    pub async fn wait_stopped(&self) {
        let _ = self.supervisor.get_cell().wait(None).await;
    }

    /// Write a trace event for this session (the door uses it for refusals it decides).
    pub fn trace_event(&self, kind: TraceKind, fields: serde_json::Value) {
        self.trace(kind, fields);
    }

    /// Test hook: make the gateway of `artifact` panic.
    pub fn inject_gateway_panic(&self, artifact: &str) -> bool {
        Peer::gateway(&self.session_id, artifact).tell(GatewayMsg::InjectPanic).is_ok()
    }

    /// Test hook: make the credentials actor panic (it is restarted).
    pub fn inject_credentials_panic(&self) -> bool {
        self.peer(role::CREDENTIALS).tell(CredentialsMsg::InjectPanic).is_ok()
    }

    /// Test hook: make the agent loop panic (it is restarted from the conversation record).
    pub fn inject_loop_panic(&self) -> bool {
        self.peer(role::LOOP).tell(LoopMsg::InjectPanic).is_ok()
    }

    /// Test hook: the next journal step carrying a trace line of `kind` fails to be written.
    pub fn inject_journal_failure(&self, kind: TraceKind) -> bool {
        self.peer(role::JOURNAL).tell(crate::journal::JournalMsg::InjectFailure(kind)).is_ok()
    }

    /// Test hook: make the tools actor panic (it is restarted).
    pub fn inject_tools_panic(&self) -> bool {
        self.peer(role::TOOLS).tell(ToolsMsg::InjectPanic).is_ok()
    }

    /// Write `session_end`, tell watchers `capsule-closed`, flush, and stop the tree.
    pub async fn shutdown(&self) {
        if let Err(e) = self.peer(role::LOOP).ask(LoopMsg::EndSession, wait::JOURNAL).await {
            tracing::warn!(session = self.session_id, error = %e, "session_end was not written");
        }
        let _ = self.peer(role::EMITTER).ask(EmitterMsg::Close, wait::CONTROL).await;
        let _ = self.supervisor.stop_and_wait(None, Some(Duration::from_secs(10))).await;
    }
}
