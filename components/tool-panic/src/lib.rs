//! Fault guest `tool-panic` (world `tool`).
//!
//! What it tries: every call to `run` panics with "tool-panic: deliberate
//! panic". On wasm32 a panic aborts, so the call ends in a wasm trap.
//!
//! What the host must do: report the call as a crashed tool (an error result
//! for that tool call, distinct from a limit being hit), keep the runtime and
//! the session up, and let the task go on.
//!
//! It deliberately does nothing else.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, ToolInput, ToolResult};

struct Component;

impl Guest for Component {
    fn run(_input: ToolInput) -> ToolResult {
        panic!("tool-panic: deliberate panic")
    }
}

export!(Component);
