//! Fault guest `driver-trap` (world `driver`).
//!
//! What it tries: every call to `run` panics with "driver-trap: deliberate
//! panic"; on wasm32 the panic aborts and the call ends in a wasm trap.
//!
//! What the host must do: treat the inference call as failed (a crashed
//! driver, reported as such and distinct from a limit being hit), fail the
//! task with a message that says so, and keep the runtime up.
//!
//! It deliberately emits no events and makes no request.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/driver@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, ToolInput, ToolResult};

struct Component;

impl Guest for Component {
    fn run(_input: ToolInput) -> ToolResult {
        panic!("driver-trap: deliberate panic")
    }
}

export!(Component);
