//! Test tool `tool-ask` (world `tool`): asks a person through `murmur:task/task`
//! `request-input` and returns what they answered.
//!
//! The call's input is JSON `{"prompt": "…"}` (a missing prompt asks "What next?"). The result
//! is `passed` with the answer as its data, or `failed` when the host answers with an error
//! string (a session that cannot ask, or a task that ended before anyone answered).

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

struct Component;

fn prompt(data: Option<&str>) -> String {
    let text = data.unwrap_or("");
    // A tiny reader for `"prompt": "<text without quotes or escapes>"`; enough for a test tool.
    text.split_once("\"prompt\"")
        .and_then(|(_, rest)| rest.split_once('"'))
        .and_then(|(_, rest)| rest.split_once('"'))
        .map(|(p, _)| p.to_string())
        .unwrap_or_else(|| "What next?".to_string())
}

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        let answer = murmur::task::task::request_input(&prompt(input.data.as_deref()));
        let failed = answer.starts_with("error:");
        ToolResult {
            status: if failed { Status::Failed } else { Status::Passed },
            summary: Some(if failed { "no answer".into() } else { "answered".into() }),
            data: Some(answer),
            data_path: None,
            truncated: false,
            metadata: Vec::new(),
        }
    }
}

export!(Component);
