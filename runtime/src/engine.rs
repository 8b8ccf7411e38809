//! The process-wide wasmtime engine, its epoch ticker and the linker.
//!
//! One [`Host`] per process: the engine is configured once (component model, async, epoch
//! interruption, pooling allocator), the linker provides every interface of CONTRACT §2, and
//! compiled components are shared through the [`ComponentCache`].

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings::ArtifactHost as HostWorld;
use crate::cache::ComponentCache;
use crate::error::{Cause, LoadError};
use crate::state::StoreState;

/// How often the epoch advances. Deadlines are counted in these ticks, so a deadline is
/// enforced to within one tick while guest code runs.
pub const EPOCH_TICK: Duration = Duration::from_millis(10);

/// Instances that may be live at once in the pooling allocator. Calls instantiate per call and
/// drop the store after, so this bounds concurrent calls, not capsules.
pub const POOL_INSTANCES: u32 = 256;

/// Bytes of each freed linear memory kept resident by default (see [`keep_resident`]).
pub const KEEP_RESIDENT: usize = 1 << 20;

/// Bytes of each freed table kept resident.
const TABLE_KEEP_RESIDENT: usize = 64 << 10;

/// Freed slots affine to other components left alone before one of them is taken over
/// (instead of a slot never used). Idle slots then hold at most (the most calls that ever ran
/// at once + this) × [`KEEP_RESIDENT`] per memory.
const MAX_UNUSED_WARM_SLOTS: u32 = 16;

/// The most `CAPSULE_KEEP_RESIDENT` may ask for (a slot never keeps more than it holds anyway).
const KEEP_RESIDENT_MAX: usize = 1 << 30;

/// Bytes of each freed linear memory kept resident: `CAPSULE_KEEP_RESIDENT` (bytes, at most
/// 1 GiB; `0` hands every page back to the kernel after each call), else [`KEEP_RESIDENT`].
/// A value that is not a number is warned about and the default used.
pub fn keep_resident() -> usize {
    let Ok(v) = std::env::var("CAPSULE_KEEP_RESIDENT") else { return KEEP_RESIDENT };
    match v.trim().parse::<usize>() {
        Ok(n) => n.min(KEEP_RESIDENT_MAX),
        Err(_) => {
            tracing::warn!(value = %v, "CAPSULE_KEEP_RESIDENT is not a number of bytes; keeping the default {KEEP_RESIDENT}");
            KEEP_RESIDENT
        }
    }
}

/// Options for [`Host::new`].
#[derive(Debug, Clone, Default)]
pub struct HostOptions {
    /// Where precompiled `.cwasm` files live; `None` keeps the cache in memory only.
    pub cache_dir: Option<PathBuf>,
}

/// The sandbox host of one process.
#[derive(Clone)]
pub struct Host {
    pub(crate) engine: Engine,
    pub(crate) linker: Arc<Linker<StoreState>>,
    pub(crate) cache: Arc<ComponentCache>,
    /// Compiles running in the background ([`crate::later`]).
    pub(crate) compiling: Arc<crate::later::Compiling>,
}

impl std::fmt::Debug for Host {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Host").finish_non_exhaustive()
    }
}

pub(crate) fn config(pooling: bool) -> Config {
    let mut c = Config::new();
    c.wasm_component_model(true);
    c.epoch_interruption(true);
    c.parallel_compilation(true);
    // `CAPSULE_PERF_MAP=1`: write /tmp/perf-<pid>.map so `perf report` names guest functions
    // (for profiling; off by default).
    if std::env::var_os("CAPSULE_PERF_MAP").is_some_and(|v| v == "1") {
        c.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    if pooling {
        let mut pool = PoolingAllocationConfig::default();
        pool.total_component_instances(POOL_INSTANCES)
            .total_core_instances(POOL_INSTANCES * 4)
            .total_memories(POOL_INSTANCES * 2)
            .total_tables(POOL_INSTANCES * 4)
            // One fiber stack per store at work, and a store holds one component instance: more
            // stacks than instances could never be used, and each one costs an `mprotect` of
            // its guard page when the engine is built (1,000 by default).
            .total_stacks(POOL_INSTANCES)
            .max_memories_per_component(crate::limiter::MAX_MEMORIES as u32)
            .max_tables_per_component(crate::limiter::MAX_TABLES as u32);
        // A freed slot keeps the pages its call wrote, reset in place to the component's initial
        // image, instead of handing them back to the kernel and faulting them in again on the
        // next call. `PAGEMAP_SCAN` (Linux 6.7 and later) finds exactly the written pages, so
        // only those are reset; without it the allocator falls back to resetting the first
        // `keep` bytes. Either way the next call sees the initial image (the `residue` escape
        // probe checks it).
        let keep = keep_resident();
        pool.linear_memory_keep_resident(keep)
            .table_keep_resident(keep.min(TABLE_KEEP_RESIDENT))
            .pagemap_scan(wasmtime::Enabled::Auto)
            .max_unused_warm_slots(MAX_UNUSED_WARM_SLOTS);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
    }
    c
}

impl Host {
    /// Build the engine (pooling when the OS allows the reservation, on-demand otherwise),
    /// start the epoch ticker and link every interface.
    pub fn new(options: HostOptions) -> Result<Host, LoadError> {
        raise_descriptor_limit();
        let engine = match Engine::new(&config(true)) {
            Ok(e) => e,
            Err(pool_err) => {
                tracing::warn!(error = %pool_err, "pooling allocator unavailable; using on-demand allocation");
                Engine::new(&config(false)).map_err(|e| compile_err("<engine>", e))?
            }
        };
        let weak = engine.weak();
        std::thread::Builder::new()
            .name("capsule-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    drop(engine);
                    std::thread::sleep(EPOCH_TICK);
                    match weak.upgrade() {
                        Some(e) => e.increment_epoch(),
                        None => break,
                    }
                }
            })
            .map_err(|e| LoadError::Compile { artifact: "<epoch ticker>".into(), source: Box::new(e) })?;
        let mut linker: Linker<StoreState> = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker).map_err(|e| compile_err("<linker>", e))?;
        crate::budget::meter_file_writes(&mut linker).map_err(|e| compile_err("<linker>", e))?;
        wasmtime_wasi_http::p2::add_only_http_to_linker_async(&mut linker).map_err(|e| compile_err("<linker>", e))?;
        HostWorld::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s).map_err(|e| compile_err("<linker>", e))?;
        // Hooks: `run-inference`, and the lifecycle interface they import for its `message`
        // type only (an instance with no functions: nothing of a hook's own export is callable
        // from a guest).
        crate::bindings::hook::murmur::runtime::inference::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
            .map_err(|e| compile_err("<linker>", e))?;
        linker.instance("murmur:hook/lifecycle@0.5.0").map_err(|e| compile_err("<linker>", e))?;
        let cache = Arc::new(ComponentCache::new(options.cache_dir, &engine));
        Ok(Host { engine, linker: Arc::new(linker), cache, compiling: Arc::default() })
    }

    /// The component cache.
    pub fn cache(&self) -> &ComponentCache {
        &self.cache
    }

    /// Bytes the freed linear memories of this host's pool keep resident (`None`: on-demand
    /// allocation, nothing is kept).
    pub fn idle_memory_resident(&self) -> Option<usize> {
        self.engine.pooling_allocator_metrics().map(|m| m.unused_memory_bytes_resident())
    }
}

/// Raise this process's soft limit on open descriptors to its hard limit, once. Each call is
/// capped at `limits.resources` live WASI resources, so many capsules' calls fit side by side
/// and one capsule cannot use up what the others' doors and the host API need.
fn raise_descriptor_limit() {
    use rustix::process::{Resource, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        let raised = rustix::process::Rlimit { current: limit.maximum, maximum: limit.maximum };
        if let Err(e) = setrlimit(Resource::Nofile, raised) {
            tracing::debug!(error = %e, "cannot raise the descriptor limit");
        }
    }
}

pub(crate) fn compile_err(artifact: &str, e: wasmtime::Error) -> LoadError {
    LoadError::Compile { artifact: artifact.to_string(), source: boxed(e) }
}

pub(crate) fn boxed(e: wasmtime::Error) -> Cause {
    e.into_boxed_dyn_error()
}
