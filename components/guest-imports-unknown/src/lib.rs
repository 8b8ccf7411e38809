//! Adversarial guest `guest-imports-unknown` (world `rogue`).
//!
//! What it tries: to call `launch-missiles` from the interface
//! `murmur:worlds/rogue-host@0.1.0`, which no Murmur host provides.
//!
//! What the host must do: refuse to load the component at all (before any
//! call), with an error naming the unknown import. `run` is never reached
//! on a correct host.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/rogue@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

struct Component;

impl Guest for Component {
    fn run(_input: ToolInput) -> ToolResult {
        murmur::worlds::rogue_host::launch_missiles();
        ToolResult {
            status: Status::Passed,
            summary: Some("the rogue import was called".to_string()),
            data: None,
            data_path: None,
            truncated: false,
            metadata: Vec::new(),
        }
    }
}

export!(Component);
