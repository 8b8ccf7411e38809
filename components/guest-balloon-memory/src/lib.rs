//! Fault guest `guest-balloon-memory` (world `tool`).
//!
//! What it tries: to use unbounded memory. It allocates 16 MiB buffers in a
//! loop, writes to every 4 KiB page of each (so nothing stays lazily
//! zeroed) and keeps them all alive, forever.
//!
//! What the host must do: stop it at the capsule's `memory_bytes` limit (the
//! store's resource limiter refuses `memory.grow`, the allocation fails and
//! the call traps), report "memory limit reached" as its own error, distinct
//! from a crash, and keep the runtime up. It never returns normally.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, ToolInput, ToolResult};
use std::hint::black_box;

const CHUNK: usize = 16 << 20;
const PAGE: usize = 4096;

struct Component;

impl Guest for Component {
    fn run(_input: ToolInput) -> ToolResult {
        let mut held: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut chunk: Vec<u8> = Vec::with_capacity(CHUNK);
            chunk.resize(CHUNK, 1);
            for page in (0..CHUNK).step_by(PAGE) {
                chunk[page] = black_box(0xA5);
            }
            held.push(black_box(chunk));
        }
    }
}

export!(Component);
