//! The sandbox host: everything needed to run one call into a Murmur driver or tool component.
//!
//! - [`Host`]: one wasmtime engine per process (component model, async, epoch interruption,
//!   pooling allocator) with its epoch ticker and the linker that provides every interface of
//!   CONTRACT §2.
//! - [`ComponentCache`]: compile once per process; precompiled `.cwasm` on disk keyed by the
//!   wasm hash and the engine's compatibility hash, so a second launch does not recompile.
//! - [`LoadedArtifact`]: a checked component (the `murmur:tool/run@0.1.0` export present, no
//!   import outside the allowed set) with its `InstancePre`.
//! - [`Grants`] and [`OutgoingPolicy`]: the capability grants of CONTRACT §4 and the outgoing
//!   HTTP policy of §5 (allowlist, gateway rewrite, credential insertion).
//! - [`call`](LoadedArtifact::call): one sandboxed call, bounded by the deadline and the memory
//!   limit, each reported as its own [`CallError`].
//! - [`Ahead`], [`ToolAhead`] and [`Waits`]: a driver's and a tool's next instance, made
//!   while the session's provider answers, each taken by one call at most with that call's
//!   own grants put in.
//!
//! This crate knows nothing of actors. Live events from a guest leave through the
//! [`GuestEvents`] trait that the caller implements.

mod affinity;
mod ahead;
mod beneath;
mod bindings;
mod bodies;
mod budget;
mod cache;
mod cache_prune;
mod call;
mod classify;
mod engine;
mod error;
mod events;
mod gate;
mod grants;
mod hook;
mod later;
mod limiter;
mod load;
mod policy;
mod state;
mod surface;
mod tool_ahead;
mod upstream;
mod waits;

pub use ahead::{Ahead, MAX_HELD, held};
pub use beneath::{Beneath, BeneathError, FileMode};
pub use budget::DiskMeter;
pub use cache::{CacheHit, ComponentCache};
pub use call::{CallOutcome, ToolInput, ToolResult, ToolStatus};
pub use engine::{EPOCH_TICK, Host, HostOptions, KEEP_RESIDENT, keep_resident};
pub use error::{CallError, LoadError};
pub use events::{GuestEvents, InferenceAnswer, InferenceAsk, InferenceReplyText, InputAnswer, NoEvents, Paused};
pub use gate::{GateOpener, SendGate, send_gate};
pub use grants::{ArtifactRole, Grants, Scope};
pub use hook::{HookError, HookEvent, HookInstance, HookOutput};
pub use later::finish_background_compiles;
pub use load::{
    ALLOWED_MURMUR_IMPORTS, Compile, ComponentKind, HOOK_EXPORT, HOOK_MURMUR_IMPORTS, LoadedArtifact, REQUIRED_EXPORT,
};
pub use policy::{Credential, GatewayRoute, KeyStyle, OutgoingPolicy, SecretKey, UpstreamStatus, gateway_address};
pub use tool_ahead::ToolAhead;
pub use waits::Waits;
