//! Adversarial guest `guest-no-run-export`: a plain program, not a library.
//!
//! What it tries: to pass as an artifact. Built for wasm32-wasip2 it becomes
//! a `wasi:cli/run` command component that does not export
//! `murmur:tool/run@0.1.0`.
//!
//! What the host must do: refuse to load it, with an error naming the missing
//! `murmur:tool/run@0.1.0` export. It only prints a greeting when run as a
//! command.

fn main() {
    println!("hello from guest-no-run-export");
}
