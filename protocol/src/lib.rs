//! Plain data of the capsule contract (CONTRACT.md): the manifest and its validation, the
//! neutral inference format, frames, trace events and diagnostics codes.
//!
//! This crate is data only. It knows nothing of actors, HTTP servers or WebAssembly; every
//! layer above it speaks in these types. It guarantees that a manifest it hands out has passed
//! every load-time rule of CONTRACT §1, and that every diagnostic carries a code, the field it
//! is about, the rule it broke and the fix.

pub mod diagnostics;
pub mod frame;
mod frame_data;
pub mod host_config;
pub mod host_file;
pub mod journal_line;
pub mod lockfile;
pub mod manifest;
pub mod models;
pub mod neutral;
pub mod trace;

pub use diagnostics::{Code, Diagnostic, Diagnostics, Severity};
pub use manifest::Manifest;
