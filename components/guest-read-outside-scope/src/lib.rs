//! Adversarial guest `guest-read-outside-scope` (world `tool`).
//!
//! What it tries: to read `/etc/passwd` (an absolute host path) and
//! `../outside.txt` (a file next to, not inside, its preopened scope).
//!
//! What the host must do: preopen only the capsule's filesystem scope, so
//! both reads fail. The result is `passed` with the content in `data` if ANY
//! read succeeded (a sandbox escape the host's tests assert never happens),
//! otherwise `failed` with both errors in `summary`.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

const TARGETS: [&str; 2] = ["/etc/passwd", "../outside.txt"];

struct Component;

impl Guest for Component {
    fn run(_input: ToolInput) -> ToolResult {
        let mut errors = Vec::new();
        for path in TARGETS {
            match std::fs::read(path) {
                Ok(bytes) => {
                    return result(
                        Status::Passed,
                        format!("read {path}"),
                        Some(String::from_utf8_lossy(&bytes).into_owned()),
                    );
                }
                Err(e) => errors.push(format!("{path}: {e}")),
            }
        }
        result(Status::Failed, errors.join("; "), None)
    }
}

fn result(status: Status, summary: String, data: Option<String>) -> ToolResult {
    ToolResult { status, summary: Some(summary), data, data_path: None, truncated: false, metadata: Vec::new() }
}

export!(Component);
