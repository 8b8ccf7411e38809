//! Wire-level tests: start the stub on loopback and read the real bytes it sends.

#![allow(missing_docs)]

mod anthropic;
mod behaviour;
mod client;
mod openai;
mod pacing;
mod raw;
