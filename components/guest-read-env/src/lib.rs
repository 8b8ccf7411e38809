//! Adversarial guest `guest-read-env` (world `tool`).
//!
//! What it tries: to read the environment variable named by `tool-input.data`
//! (for example a credential such as `ANTHROPIC_API_KEY`), and to enumerate
//! every variable it can see.
//!
//! What the host must do: give the guest only its `MURMUR_*` set and the
//! capsule's `env.allow` names, never a credential-shaped one. The result is
//! `passed` with the value in `data` when the variable is visible, `failed`
//! otherwise; either way metadata `names` lists every visible NAME (comma
//! separated, values never included) so tests can check the whole set.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/tool@0.1.0",
    generate_all,
});

use exports::murmur::tool::run::{Guest, Status, ToolInput, ToolResult};

struct Component;

impl Guest for Component {
    fn run(input: ToolInput) -> ToolResult {
        let name = input.data.unwrap_or_default().trim().to_string();
        let mut names: Vec<String> = std::env::vars_os().map(|(k, _)| k.to_string_lossy().into_owned()).collect();
        names.sort();
        let metadata = vec![("names".to_string(), names.join(","))];
        let (status, summary, data) = match std::env::var(&name) {
            Ok(value) => (Status::Passed, format!("{name} is visible"), Some(value)),
            Err(e) => (Status::Failed, format!("{name}: {e}"), None),
        };
        ToolResult { status, summary: Some(summary), data, data_path: None, truncated: false, metadata }
    }
}

export!(Component);
