//! Artifact folders as Murmur writes them: the component found through `requires_files`, the
//! description and `input_schema` offered to the model, keys this runtime does not honour
//! warned by name, and what cannot run here refused with its code.

use crate::common::*;
use capsule_stub::Turn;
use serde_json::json;

/// An artifact folder under the capsule's folder: `murmur.yaml` plus the named components
/// (copies of `components/dist/tool-files.wasm`).
fn artifact_folder(cap: &Capsule, folder: &str, yaml: &str, wasm: &[&str]) {
    let dir = cap.path().join(folder);
    std::fs::create_dir_all(&dir).expect("folder");
    std::fs::write(dir.join("murmur.yaml"), yaml).expect("manifest");
    for w in wasm {
        std::fs::copy(dist("tool-files"), dir.join(w)).expect("component");
    }
}

fn with_tool_folder(endpoint: &str, folder: &str) -> Capsule {
    anthropic_capsule(endpoint, &[("notes", folder)], "")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_murmur_tool_folder_runs_and_the_model_is_offered_its_description_and_schema() {
    let stub = stub(vec![
        Turn::tool_call("notes", json!({"op": "write", "path": "a.txt", "content": "hi"})),
        Turn::text("written"),
    ]);
    let cap = with_tool_folder(&stub.url(), "notes-tool");
    let yaml = r#"name: notes
version: "0.2.0"
runtime: tool
implementation: wasm
description: "  Keep notes in files.  "
input: '{"type":"object","properties":{"op":{"type":"string"},"path":{"type":"string"}},"required":["op"]}'
requires_files:
  - notes.wasm
  - README.md
tags: [files]
capabilities:
  filesystem:
    allow: ["."]
"#;
    artifact_folder(&cap, "notes-tool", yaml, &["notes.wasm"]);
    let session = cap.launch().await.expect("a Murmur artifact folder launches");
    let warned: Vec<String> =
        session.warnings.iter().map(|w| w.to_string()).filter(|w| w.starts_with("W-CAP")).collect();
    assert_eq!(warned.len(), 1, "one artifact warning: {warned:?}");
    assert!(warned[0].starts_with("W-CAP-003") && warned[0].contains("capabilities"), "{warned:?}");

    let (outcome, _) = run_task(&session, "take a note").await;
    assert_eq!(outcome.message, "written");
    let first = &stub.requests()[0].body;
    let tool = first["tools"].as_array().and_then(|t| t.iter().find(|t| t["name"] == "notes")).expect("offered");
    assert_eq!(tool["description"], "Keep notes in files.");
    assert_eq!(tool["input_schema"]["required"], json!(["op"]), "{tool}");
    let second = &stub.requests()[1].body;
    let result = second["messages"].as_array().and_then(|m| m.last()).expect("last message").to_string();
    assert!(result.contains("tool_result") && !result.contains("\"is_error\":true"), "the tool ran: {result}");
    assert_eq!(std::fs::read_to_string(session.files.join("a.txt")).expect("the file the tool wrote"), "hi");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_folder_without_module_is_found_by_murmurs_rule_or_refused_saying_what_to_list() {
    let stub = stub(vec![]);
    let launch = |folder: &str, yaml: &str, wasm: &[&str]| {
        let cap = with_tool_folder(&stub.url(), folder);
        artifact_folder(&cap, folder, yaml, wasm);
        cap
    };
    // Nothing listed, one .wasm at the top: that one.
    let one = launch("one", "name: notes\nruntime: tool\n", &["x.wasm"]);
    one.launch().await.expect("the only .wasm").shutdown().await;
    // Several, one of them capsule.wasm: that one.
    let named = launch("named", "name: notes\nruntime: tool\n", &["a.wasm", "capsule.wasm"]);
    named.launch().await.expect("capsule.wasm").shutdown().await;
    // Several and no capsule.wasm, or none at all: refused with what to do.
    for (cap, code, says) in [
        (launch("two", "name: notes\nruntime: tool\n", &["a.wasm", "b.wasm"]), "E-CAP-006", "several components"),
        (launch("none", "name: notes\nruntime: tool\n", &[]), "E-CAP-001", "names no component"),
        (launch("skill", "name: s\nruntime: skill\n", &["s.wasm"]), "E-CAP-008", "do not run in this runtime"),
    ] {
        let e = cap.launch().await.err().expect("refused").to_string();
        assert!(e.contains(code) && e.contains(says), "{e}");
    }
}
