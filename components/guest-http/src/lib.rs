//! `guest-http`: the code the inference drivers share, as a plain Rust
//! library (an `rlib`). It is NOT a component: it exports no `wit` world,
//! builds no `.wasm` of its own and never appears in `dist/`; it is compiled
//! into `driver-anthropic`, `driver-openai` and `driver-legacy`.
//!
//! - [`target`]: `MURMUR_INFERENCE_ENDPOINT` + a provider path → where to send;
//! - [`input`]: the checks made before anything is sent;
//! - [`cursor`]: a cursor over the runtime's compact JSON, for the fast list
//!   reader and the drivers' one-pass writers of the message list, and
//!   [`compact_block`]: one content block read through it;
//! - [`neutral`]: the neutral request read in one pass, borrowed from the
//!   input, with the checks and error messages both drivers share
//!   ([`lenient`] holds its readers, [`scan`] the byte-level JSON scanner
//!   under them);
//! - [`wire`]: writing the provider body as JSON text, fragments copied
//!   verbatim;
//! - [`http`]: one POST through `wasi:http` (the `wasip2` crate), the
//!   response body read piece by piece or whole;
//! - [`sse`]: the incremental server-sent-events parser;
//! - [`flat`]: a stream event's fields as slices of its text, read as a
//!   `Value` would read them but without the tree;
//! - [`exchange`]: one streaming call from POST to last event, handing the
//!   answer to a driver's assembler ([`exchange::Answer`]);
//! - [`shape`]: the `passed` / `failed` / `error` result shapes, without the
//!   `wit` types.
//!
//! Guarantees: nothing here panics on bad input or a bad answer; every
//! failure is a `String` message, the same text the drivers always reported.
//! The pure parts ([`target`], [`input`], [`neutral`], [`wire`], [`sse`],
//! [`exchange::feed`], [`shape`]) are unit-tested natively (`cargo test`).
//!
//! Deliberately not done: anything provider-specific (what each request
//! translation sends, event meaning, response assembly stay in each
//! driver), credentials (the host gateway adds them), the `wit` bindings
//! (each component generates its own world).

pub mod compact_block;
pub mod cursor;
#[cfg(feature = "testing")]
pub mod differential;
pub mod exchange;
pub mod flat;
pub mod http;
pub mod input;
pub mod lenient;
pub mod neutral;
pub mod scan;
pub mod shape;
pub mod sse;
pub mod target;
pub mod wire;
