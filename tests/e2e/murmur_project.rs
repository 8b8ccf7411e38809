//! A Murmur project, as `mur` lays one out, runs unchanged through the real `capsule` binary:
//! the capsule's `murmur.yaml` names every artifact (driver, tool, compaction hook) by name and
//! version only; each is a `.mur.zip` package with its `.sha256` in the project's
//! `.murmur/artifacts`, packed here from this repository's components the way Murmur packs them
//! (the artifact's `murmur.yaml` and its `requires_files` at the zip's top); the first run
//! writes `murmur.lock`, the second is held to it; a long task compacts through the hook.

use crate::common::*;
use capsule_stub::Turn;
use serde_json::json;
use sha2::Digest;
use std::io::Write;
use std::path::Path;

/// Pack `<name>-<version>.mur.zip` from a manifest and one component into the project store,
/// with its bare-hex `.sha256`; returns that SHA-256 (what `murmur.lock` records, as Murmur
/// does, under `sha256.wasm`).
fn pack(project: &Path, name: &str, version: &str, manifest: &str, wasm_name: &str, component: &str) -> String {
    let store = project.join(".murmur/artifacts").join(name).join(version);
    std::fs::create_dir_all(&store).expect("store");
    let wasm = std::fs::read(dist(component)).expect("component");
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Deflated);
    zip.start_file("murmur.yaml", opts).expect("entry");
    zip.write_all(manifest.as_bytes()).expect("write");
    zip.start_file(wasm_name, opts).expect("entry");
    zip.write_all(&wasm).expect("write");
    let bytes = zip.finish().expect("zip").into_inner();
    std::fs::write(store.join(format!("{name}-{version}.mur.zip")), &bytes).expect("package");
    let sum = hex::encode(sha2::Sha256::digest(&bytes));
    std::fs::write(store.join(format!("{name}-{version}.sha256")), &sum).expect("sum");
    sum
}

fn run(project: &Path, work: &Path, task: &str) -> (bool, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["run", project.to_str().expect("path"), "--task", task, "--workdir", work.to_str().expect("path")])
        .env("ANTHROPIC_API_KEY", "sk-test-not-a-real-key")
        .env("CAPSULE_CACHE_DIR", work.join("cache"))
        .output()
        .expect("capsule runs");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.success(), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_murmur_project_with_installed_packages_runs_unchanged_and_compacts() {
    let turns = vec![
        Turn::tool_call("notes", json!({"op": "read", "path": "a.txt"})),
        Turn::tool_call("notes", json!({"op": "read", "path": "b.txt"})),
        Turn::text("SUMMARY: both files were read"),
        Turn::text("finished"),
        Turn::text("second run"),
    ];
    let stub = stub(turns);
    let project = tempfile::tempdir().expect("project");
    let p = project.path();
    let manifest = format!(
        r#"name: my-agent
version: "0.1.0"

context:
  max_tokens: 20000

artifacts:
  - name: murmur-driver-anthropic
    version: "0.3.0"
    runtime: driver
  - name: notes
    version: "0.2.0"
  - name: murmur-hook-compact
    version: "0.1.0"
    runtime: hook

inference:
  transport: http
  endpoint: {endpoint}
  model: claude-test
  api_key: ${{ANTHROPIC_API_KEY}}
  driver:
    artifact: murmur-driver-anthropic
  compaction:
    threshold: 0.6
"#,
        endpoint = stub.url()
    );
    std::fs::write(p.join("murmur.yaml"), manifest).expect("manifest");
    let driver = pack(
        p,
        "murmur-driver-anthropic",
        "0.3.0",
        "name: murmur-driver-anthropic\nversion: \"0.3.0\"\nruntime: driver\nimplementation: wasm\ndescription: Anthropic Messages driver.\nrequires_files:\n  - murmur_driver_anthropic.wasm\n",
        "murmur_driver_anthropic.wasm",
        "driver-anthropic",
    );
    let tool = pack(
        p,
        "notes",
        "0.2.0",
        "name: notes\nversion: \"0.2.0\"\nruntime: tool\nimplementation: wasm\ndescription: Read and write notes.\ninput_schema: '{\"type\":\"object\",\"properties\":{\"op\":{\"type\":\"string\"},\"path\":{\"type\":\"string\"}},\"required\":[\"op\"]}'\nrequires_files:\n  - notes.wasm\n",
        "notes.wasm",
        "tool-files",
    );
    let hook = pack(
        p,
        "murmur-hook-compact",
        "0.1.0",
        "name: murmur-hook-compact\nversion: \"0.1.0\"\nruntime: hook\nbinding: on-compaction\nexecution_mode: blocking\ncommit_policy: replace-context\ndescription: Summarise the history when the window fills.\nrequires_files:\n  - murmur_hook_compact.wasm\n",
        "murmur_hook_compact.wasm",
        "hook-compact",
    );
    let work = tempfile::tempdir().expect("work");
    let files = work.path().join("files");
    std::fs::create_dir_all(&files).expect("files");
    std::fs::write(files.join("a.txt"), (0..4000).map(|i| format!("alpha{i} ")).collect::<String>()).expect("a");
    std::fs::write(files.join("b.txt"), (0..4000).map(|i| format!("beta{i} ")).collect::<String>()).expect("b");

    let (ok, out) = run(p, work.path(), "read both files");
    assert!(ok, "{out}");
    assert!(out.contains("finished"), "{out}");
    let requests = stub.requests();
    assert_eq!(requests.len(), 4, "two reads, the hook's summary, the reply");
    assert_eq!(
        requests[0].headers.iter().find(|(k, _)| k == "x-api-key").map(|(_, v)| v.as_str()),
        Some("sk-test-not-a-real-key")
    );
    assert_eq!(requests[0].body["tools"][0]["description"], "Read and write notes.");
    assert!(!requests[3].body.to_string().contains("alpha3999") && requests[3].body.to_string().contains("SUMMARY"));

    let lock = std::fs::read_to_string(p.join("murmur.lock")).expect("the first run writes murmur.lock");
    assert!(lock.contains("lock_version: 1"), "{lock}");
    for (name, sum) in [("murmur-driver-anthropic", &driver), ("notes", &tool), ("murmur-hook-compact", &hook)] {
        assert!(lock.contains(name) && lock.contains(sum.as_str()), "{name} {sum} in {lock}");
    }
    // The second run is held to the lock; a changed package is then refused by its hash.
    let (ok, out) = run(p, work.path(), "again");
    assert!(ok && out.contains("second run"), "{out}");
    let zip = p.join(".murmur/artifacts/notes/0.2.0/notes-0.2.0.mur.zip");
    let mut bytes = std::fs::read(&zip).expect("zip");
    let last = bytes.len() - 1;
    bytes[last] ^= 1;
    std::fs::write(&zip, bytes).expect("tamper");
    let (ok, out) = run(p, work.path(), "tampered");
    assert!(!ok && out.contains("E-CAP-010"), "{out}");
}
