//! Fault guest `guest-spin-forever` (world `tool`).
//!
//! What it tries: to hold the host's thread forever with a busy loop that the
//! compiler cannot remove (the counter goes through `black_box`).
//!
//! What the host must do: interrupt it at the capsule's `deadline_seconds`
//! (epoch interruption), report "deadline reached" as its own error, distinct
//! from a crash, and keep the runtime up. It never returns normally.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, ToolInput, ToolResult};
use std::hint::black_box;

struct Component;

impl Guest for Component {
    fn run(_input: ToolInput) -> ToolResult {
        let mut counter: u64 = 0;
        loop {
            counter = black_box(counter.wrapping_add(1));
        }
    }
}

export!(Component);
