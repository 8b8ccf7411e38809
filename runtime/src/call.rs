//! One sandboxed call into an artifact's `murmur:tool/run.run`.
//!
//! Each call gets a fresh store from the pre-linked component (microseconds with the pooling
//! allocator), so a trapped or interrupted instance is never reused and no state leaks from
//! one call to the next. The call is bounded twice: epoch interruption traps guest code that
//! runs past the deadline, and a timer bounds time spent waiting in host calls. Hitting the
//! deadline or the memory limit is its own [`CallError`]; a guest trap carries the guest's
//! stderr, where a Rust panic writes its message.

use std::sync::Arc;
use std::time::{Duration, Instant};
use wasmtime::{Store, Trap};
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi_http::WasiHttpCtx;

use crate::ahead::{ForCall, Made};
use crate::beneath::Beneath;
use crate::bindings::exports::murmur::tool::run as wit;
use crate::bodies::ResponseLimit;
use crate::budget::CallDisk;
use crate::classify::stderr_text;
use crate::engine::{Host, boxed};
use crate::error::CallError;
use crate::events::GuestEvents;
use crate::grants::GrantError;
use crate::grants::{Grants, STDERR_CAPTURE_BYTES};
use crate::limiter::CallLimiter;
use crate::load::{LoadedArtifact, Pre};
use crate::policy::Hooks;
use crate::state::StoreState;

/// Bytes one `wasi:http` fields resource (a request's or response's headers) may hold in
/// memory. With `limits.resources` this bounds what header bloat can make the host hold.
pub const FIELD_SIZE_LIMIT: usize = 32 * 1024;

/// Time allowed for instantiation, separate from the call's own deadline.
pub const INSTANTIATE_DEADLINE: Duration = Duration::from_secs(30);

/// `tool-input`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolInput {
    /// The input (JSON for drivers).
    pub data: Option<String>,
    /// A log path, when granted.
    pub log_path: Option<String>,
}

/// `tool-result.status`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolStatus {
    /// Passed.
    Passed,
    /// The work failed.
    Failed,
    /// The artifact failed.
    Error,
}

/// `tool-result`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolResult {
    /// Status.
    pub status: ToolStatus,
    /// Message.
    pub summary: Option<String>,
    /// Output.
    pub data: Option<String>,
    /// Output file.
    pub data_path: Option<String>,
    /// Whether the output was truncated.
    pub truncated: bool,
    /// Metadata pairs.
    pub metadata: Vec<(String, String)>,
}

/// A finished call with its timings.
#[derive(Debug)]
pub struct CallOutcome {
    /// The result or why there is none.
    pub result: Result<ToolResult, CallError>,
    /// Time this call spent getting its instance: making it, or taking the one made ahead.
    pub instantiate_time: Duration,
    /// Whether the instance was made ahead of the call ([`crate::ahead`]).
    pub made_ahead: bool,
    /// Time inside the call.
    pub call_time: Duration,
    /// What the guest wrote to stderr.
    pub stderr: String,
    /// The status of the last HTTP response the call received, if any.
    pub upstream: Option<crate::policy::UpstreamStatus>,
    /// The last request of the call that got no answer: `(authority, what went wrong)`.
    pub unreachable: Option<(String, String)>,
}

/// `run`, or `Err` once it has used `deadline` of its own time (`own`: wall time minus time
/// spent waiting for a person).
pub(crate) async fn within_own_time<F: std::future::Future>(
    run: F,
    deadline: Duration,
    own: &impl Fn() -> Duration,
) -> Result<F::Output, ()> {
    let mut run = std::pin::pin!(run);
    loop {
        let left = deadline.saturating_sub(own());
        if left.is_zero() {
            return Err(());
        }
        if let Ok(out) = tokio::time::timeout(left, run.as_mut()).await {
            return Ok(out);
        }
    }
}

/// What guest code does at each epoch tick: past its deadline it traps; before it, the guest
/// steps aside so the executor runs its other tasks, then goes on for one more tick. A guest
/// that never calls the host therefore holds a runtime thread for at most one tick at a time,
/// never its whole deadline (two spinning guests on a 2-core host would otherwise stall the
/// door, the API and lease renewals until their deadlines).
fn at_tick(past_deadline: bool) -> wasmtime::Result<wasmtime::UpdateDeadline> {
    if past_deadline {
        return Err(Trap::Interrupt.into());
    }
    Ok(wasmtime::UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now())))
}

impl CallOutcome {
    /// A call refused before its instance existed.
    fn refused(err: CallError) -> CallOutcome {
        CallOutcome {
            result: Err(err),
            instantiate_time: Duration::ZERO,
            made_ahead: false,
            call_time: Duration::ZERO,
            stderr: String::new(),
            upstream: None,
            unreachable: None,
        }
    }
}

/// A fresh store with `grants`: its WASI context, HTTP policy, limiter and event sink, armed
/// with the instantiation deadline. `inline_files`: the store's WASI file operations block
/// the thread that runs it (only on a thread of its own, see [`LoadedArtifact::call`]). A
/// tool's folder is resolved now.
pub(crate) fn new_store(
    host: &Host,
    grants: &Grants,
    events: Arc<dyn GuestEvents>,
    artifact: &str,
    inline_files: bool,
) -> Result<Store<StoreState>, CallError> {
    let folder = match grants.folder() {
        Some(scope) => Some(scope.resolve().map_err(|e| grant_error(GrantError::Scope(e), artifact))?),
        None => None,
    };
    new_store_in(host, grants, events, artifact, inline_files, folder.as_ref())
}

/// [`new_store`] with the folder already resolved: `folder` is preopened (none: no folder).
pub(crate) fn new_store_in(
    host: &Host,
    grants: &Grants,
    events: Arc<dyn GuestEvents>,
    artifact: &str,
    inline_files: bool,
    folder: Option<&Beneath>,
) -> Result<Store<StoreState>, CallError> {
    let stderr = MemoryOutputPipe::new(STDERR_CAPTURE_BYTES);
    let wasi = grants.wasi_ctx_in(stderr.clone(), inline_files, folder).map_err(|e| grant_error(e, artifact))?;
    let l = grants.limits;
    let mut http = WasiHttpCtx::new();
    http.set_field_size_limit(FIELD_SIZE_LIMIT);
    let mut table = wasmtime::component::ResourceTable::new();
    table.set_max_capacity(l.resources as usize);
    let paused = Arc::new(crate::events::Paused::default());
    let state = StoreState {
        wasi,
        http,
        table,
        hooks: Hooks {
            policy: grants.policy.clone(),
            response: ResponseLimit { bytes: l.response_bytes, hit: Default::default() },
            last: Default::default(),
            unreachable: Default::default(),
            paused: paused.clone(),
            sent: None,
        },
        limiter: CallLimiter::new(l.memory_bytes, l.table_elements, l.instances),
        events,
        paused,
        role: grants.role,
        stderr,
        disk: CallDisk::new(grants.disk.clone(), l.disk_bytes),
    };
    let mut store = Store::new(&host.engine, state);
    store.limiter(|s| &mut s.limiter);
    let t0 = Instant::now();
    store.epoch_deadline_callback(move |_| at_tick(t0.elapsed() >= INSTANTIATE_DEADLINE));
    store.set_epoch_deadline(1);
    Ok(store)
}

/// A WASI context that could not be built, as the call's error.
pub(crate) fn grant_error(e: GrantError, artifact: &str) -> CallError {
    let artifact = artifact.to_string();
    match e {
        GrantError::Scope(source) => CallError::Scope { artifact, source },
        GrantError::Wasi(e) => CallError::Instantiate { artifact, source: boxed(e) },
    }
}

/// Arm `store` with `deadline` of the guest's own time from now: the epoch callback traps past
/// it, and the returned clock (wall time minus time paused waiting on the host: a person's
/// answer, a hook's `run-inference`) bounds the outer wait.
pub(crate) fn arm_deadline(store: &mut Store<StoreState>, deadline: Duration) -> impl Fn() -> Duration + Clone + use<> {
    store.set_epoch_deadline(1);
    let t1 = Instant::now();
    let paused = store.data().paused.clone();
    let paused_before = paused.total();
    let own = move || t1.elapsed().saturating_sub(paused.total().saturating_sub(paused_before));
    let own_epoch = own.clone();
    store.epoch_deadline_callback(move |_| at_tick(own_epoch() >= deadline));
    own
}

impl LoadedArtifact {
    /// Start, ahead of the first call, one blocking-pool thread if a call with any of `grants`
    /// would run on one (see [`LoadedArtifact::call`]); nothing when every call stays on the
    /// runtime's workers or there is no runtime. A first tool call otherwise creates the thread
    /// itself, about 50 µs of its turn. The thread also does now what a first call on it would:
    /// wasmtime's per-thread set-up (its signal stack), the seed of the thread's random numbers
    /// (a WASI context takes two) and tokio's parking state (the call runs in `block_on`), and
    /// in a one-worker runtime it goes to the worker's CPU as a call's thread does
    /// ([`crate::affinity`]). tokio keeps an idle blocking thread for 10 s, so a call that
    /// comes later pays for its thread as before: this only takes the cost out of a quick first
    /// turn.
    pub fn warm_call_thread<'a>(grants: impl IntoIterator<Item = &'a Grants>) {
        if grants.into_iter().any(Grants::has_folder)
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let handle = runtime.clone();
            let place = crate::affinity::Place::ahead();
            // No store, no instance and no guest code: nothing here is granted anything.
            drop(runtime.spawn_blocking(move || {
                place.take();
                wasmtime::Engine::tls_eager_initialize();
                drop(wasmtime_wasi::WasiCtxBuilder::new().build());
                handle.block_on(async {});
            }));
        }
    }

    /// Run one call with the given grants; live events go to `events`.
    ///
    /// A tool with a folder runs on a thread of its own from tokio's blocking pool, and its
    /// WASI file operations run inline on that thread. Otherwise every file operation would be
    /// its own hop to a blocking-pool thread and back (a folder listing took about 260 µs
    /// that way, about 110 µs inline). A slow disk then holds only that call's thread, never a
    /// runtime worker. In a runtime with one worker, that thread is kept on the worker's CPU
    /// ([`crate::affinity`]). Dropping the returned future stops the call, as it does for any
    /// call: the guest stops at its next host call or epoch tick.
    pub async fn call(
        &self,
        host: &Host,
        grants: &Grants,
        events: Arc<dyn GuestEvents>,
        input: ToolInput,
    ) -> CallOutcome {
        if !grants.has_folder() {
            // Boxed: the call's future is several KiB, and an actor that awaits it inline in a
            // handler would keep that much in its message loop for its whole life.
            // The store is dropped here, with the rest of the pair.
            return Box::pin(self.call_here(host, grants, events, input, false, ForCall::default())).await.0;
        }
        self.on_own_thread(host, grants, events, input, None, false).await.0
    }

    /// The call on a thread of its own from tokio's blocking pool (see [`LoadedArtifact::call`]),
    /// in `made` when there is one. The call's store comes back beside the outcome when
    /// `give_back`; otherwise the thread drops it after sending the answer.
    pub(crate) async fn on_own_thread(
        &self,
        host: &Host,
        grants: &Grants,
        events: Arc<dyn GuestEvents>,
        input: ToolInput,
        made: Option<Made>,
        give_back: bool,
    ) -> (CallOutcome, Option<Store<StoreState>>) {
        let (this, host, grants) = (self.clone(), host.clone(), grants.clone());
        let runtime = tokio::runtime::Handle::current();
        // Dropped with this future (or after the call): the call on the other thread ends.
        let (_stop_on_drop, stopped) = tokio::sync::oneshot::channel::<std::convert::Infallible>();
        let (answer, answered) = tokio::sync::oneshot::channel();
        // Where the call's thread runs: beside a one-worker runtime's worker, when no other
        // such call runs (`affinity`).
        let place = crate::affinity::Place::ask();
        let job = tokio::task::spawn_blocking(move || {
            place.take();
            runtime.block_on(async move {
                let ahead = ForCall { made, sent: None };
                tokio::select! {
                    (outcome, store) = this.call_here(&host, &grants, events, input, true, ahead) => {
                        // The answer leaves before the store is torn down: resetting the
                        // instance's memory slot is this thread's work while the caller goes on
                        // (or, given back, the caller's to do when it suits).
                        // The call counts as done with its answer, so a next call asked at once
                        // (a turn's second tool call) is still kept beside the worker.
                        let (kept, store) = if give_back { (store, None) } else { (None, store) };
                        let _ = answer.send((outcome, kept));
                        drop(place);
                        drop(store);
                    }
                    _ = stopped => {}
                }
            })
        });
        if let Ok(answer) = answered.await {
            return answer;
        }
        // No answer: the thread stopped before it had one.
        let refused = |source| CallOutcome::refused(CallError::Instantiate { artifact: self.name.clone(), source });
        match job.await {
            Ok(()) => (refused("the call was stopped before it finished".into()), None),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => (refused(Box::new(e)), None),
        }
    }

    /// The call on this thread; `inline_files`: WASI file operations block this thread; `ahead`:
    /// the instance made ahead for it and the signal its request gives ([`crate::ahead`]). The
    /// call's store (when one was made) comes back beside the outcome, for the caller to drop
    /// when it suits.
    pub(crate) async fn call_here(
        &self,
        host: &Host,
        grants: &Grants,
        events: Arc<dyn GuestEvents>,
        input: ToolInput,
        inline_files: bool,
        ahead: ForCall,
    ) -> (CallOutcome, Option<Store<StoreState>>) {
        let ForCall { made, sent } = ahead;
        let pre = match self.pre().await {
            Ok(Pre::Run(pre)) => pre,
            Ok(Pre::Hook(_)) => {
                let refused = CallOutcome::refused(CallError::Instantiate {
                    artifact: self.name.clone(),
                    source: "a hook has no `run` export; the runtime calls it through its lifecycle".into(),
                });
                return (refused, None);
            }
            Err(e) => return (CallOutcome::refused(e), None),
        };
        let l = grants.limits;
        let t0 = Instant::now();
        let made_ahead = made.is_some();
        let (mut store, instance) = match made {
            // A tool's folder is resolved now, on the call's thread, as for a store made here;
            // the context made ahead stays only if it holds that very folder.
            Some(mut made) if grants.has_folder() => {
                if let Err(e) = made.folder_now(grants, inline_files) {
                    return (CallOutcome::refused(grant_error(e, &self.name)), Some(made.store));
                }
                (made.store, made.instance)
            }
            Some(made) => (made.store, made.instance),
            None => {
                let mut store = match new_store(host, grants, events, &self.name, inline_files) {
                    Ok(s) => s,
                    Err(e) => return (CallOutcome::refused(e), None),
                };
                match pre.instantiate_async(&mut store).await {
                    Ok(i) => (store, i),
                    Err(e) => {
                        let err = self.classify(e, &store, Duration::from_secs(l.deadline_seconds), true);
                        let outcome = CallOutcome {
                            result: Err(err),
                            instantiate_time: t0.elapsed(),
                            made_ahead,
                            call_time: Duration::ZERO,
                            stderr: stderr_text(&store),
                            upstream: None,
                            unreachable: None,
                        };
                        return (outcome, Some(store));
                    }
                }
            }
        };
        let instantiate_time = t0.elapsed();
        store.data_mut().hooks.sent = sent;
        let deadline = Duration::from_secs(l.deadline_seconds);
        let wit_input = wit::ToolInput { data: input.data, log_path: input.log_path };
        let t1 = Instant::now();
        // Time spent waiting for a person (`request-input`) is not the guest's: past the
        // deadline, the guest goes on for whatever of its own time remains.
        let own = arm_deadline(&mut store, deadline);
        let run = instance.murmur_tool_run().call_run(&mut store, &wit_input);
        let result = match within_own_time(run, deadline, &own).await {
            Err(_elapsed) => Err(CallError::Deadline { artifact: self.name.clone(), seconds: deadline.as_secs_f64() }),
            Ok(Err(e)) => Err(self.classify(e, &store, deadline, false)),
            Ok(Ok(r)) if result_size(&r) > l.output_bytes => Err(CallError::HostLimit {
                artifact: self.name.clone(),
                what: "the size of its result",
                limit: l.output_bytes,
                key: "output_bytes",
            }),
            Ok(Ok(r)) => Ok(ToolResult {
                status: match r.status {
                    wit::Status::Passed => ToolStatus::Passed,
                    wit::Status::Failed => ToolStatus::Failed,
                    wit::Status::Error => ToolStatus::Error,
                },
                summary: r.summary,
                data: r.data,
                data_path: r.data_path,
                truncated: r.truncated,
                metadata: r.metadata,
            }),
        };
        let call_time = t1.elapsed();
        // A response cut at its cap is the host's limit, whatever the guest made of the error.
        let result = if store.data().hooks.response.hit.load(std::sync::atomic::Ordering::SeqCst) {
            Err(CallError::HostLimit {
                artifact: self.name.clone(),
                what: "the bytes of one HTTP response",
                limit: l.response_bytes,
                key: "response_bytes",
            })
        } else {
            result
        };
        let upstream = *store.data().hooks.last.lock().unwrap_or_else(|p| p.into_inner());
        let unreachable = store.data().hooks.unreachable.lock().unwrap_or_else(|p| p.into_inner()).take();
        let stderr = stderr_text(&store);
        let outcome = CallOutcome { result, instantiate_time, made_ahead, call_time, stderr, upstream, unreachable };
        (outcome, Some(store))
    }
}

/// Bytes a result carries: data, summary, data path and metadata.
fn result_size(r: &wit::ToolResult) -> u64 {
    let opt = |s: &Option<String>| s.as_ref().map_or(0, String::len);
    let meta: usize = r.metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
    (opt(&r.data) + opt(&r.summary) + opt(&r.data_path) + meta) as u64
}
