//! The stub as a process: `capsule` calls [`serve_cli`] for its stub-provider mode and the demo.
//!
//! Guarantees: the readiness line is printed (and flushed, stdout being line-buffered) only once
//! the socket is listening, so a parent process may connect as soon as it reads it. Deliberately
//! not here: argument parsing, which belongs to the binary.

use std::path::Path;

use crate::{Script, Stub, StubError};

/// Loads the script at `script_path`, starts the stub on `port` (a free one when `None`), prints
/// `stub-provider listening on http://127.0.0.1:PORT` to stdout and serves until ctrl-c.
///
/// Errors name the script file and keep the parse problem as their source.
pub async fn serve_cli(script_path: &Path, port: Option<u16>) -> Result<(), StubError> {
    let script = Script::load(script_path)?;
    let mut stub = Stub::start_on(script, port.unwrap_or(0))?;
    println!("stub-provider listening on {}", stub.url());
    tokio::select! {
        signal = tokio::signal::ctrl_c() => {
            stub.shutdown();
            signal.map_err(|source| StubError::Signal { source })
        }
        ended = stub.stopped() => ended,
    }
}
