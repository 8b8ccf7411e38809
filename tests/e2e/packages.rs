//! Installed Murmur packages: `capsule install` (the real binary) packs an artifact folder into
//! the project's store; a capsule naming the artifact by name and version runs it; the first
//! launch writes `murmur.lock`, later ones hold the package to it; a missing, changed or unsafe
//! package each gets its own code.

use crate::common::*;
use capsule_stub::Turn;
use serde_json::json;
use std::io::Write;
use std::path::{Path, PathBuf};

fn capsule_naming(endpoint: &str) -> Capsule {
    Capsule::new(&format!(
        "name: packaged\nversion: 0.1.0\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: {{DIST}}/driver-anthropic.wasm\n    gateway: {{endpoint: '{endpoint}', keyless: true}}\n  - name: notes\n    version: 0.2.0\n    runtime: tool\ninference:\n  model: claude-test\n  driver: {{artifact: anthropic}}\n"
    ))
}

/// A Murmur-style artifact folder for `notes@0.2.0` (the file tool's component).
fn notes_folder(root: &Path) -> PathBuf {
    let folder = root.join("notes-src");
    std::fs::create_dir_all(&folder).expect("folder");
    std::fs::write(
        folder.join("murmur.yaml"),
        "name: notes\nversion: 0.2.0\nruntime: tool\ndescription: Keep notes.\ninput_schema: {type: object, properties: {op: {type: string}}}\nrequires_files: [notes.wasm]\n",
    )
    .expect("manifest");
    std::fs::copy(dist("tool-files"), folder.join("notes.wasm")).expect("component");
    folder
}

fn install(args: &[&str]) -> (bool, String, String) {
    let out =
        std::process::Command::new(env!("CARGO_BIN_EXE_capsule")).arg("install").args(args).output().expect("runs");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into(), String::from_utf8_lossy(&out.stderr).into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_installed_package_runs_by_name_and_version_and_the_lock_then_holds_it() {
    let stub = stub(vec![
        Turn::tool_call("notes", json!({"op": "write", "path": "n.txt", "content": "x"})),
        Turn::text("noted"),
    ]);
    let cap = capsule_naming(&stub.url());
    let e = cap.launch().await.err().expect("not installed yet").to_string();
    assert!(e.starts_with("E-CAP-009") && e.contains("no network registry") && e.contains("capsule install"), "{e}");

    let src = tempfile::tempdir().expect("tempdir");
    let folder = notes_folder(src.path());
    let project = cap.path().display().to_string();
    let (ok, stdout, stderr) = install(&[folder.to_str().expect("path"), "--project", &project]);
    assert!(ok && stdout.starts_with("installed notes@0.2.0"), "{stdout}{stderr}");
    let store = cap.path().join(".murmur/artifacts/notes/0.2.0");
    let sum = std::fs::read_to_string(store.join("notes-0.2.0.sha256")).expect("checksum");
    assert_eq!(sum.len(), 64, "bare hex, no newline: {sum:?}");

    let session = cap.launch().await.expect("launches from the store");
    let (outcome, _) = run_task(&session, "note it").await;
    assert_eq!(outcome.message, "noted");
    let tool = &stub.requests()[0].body["tools"][0];
    assert_eq!((tool["name"].as_str(), tool["description"].as_str()), (Some("notes"), Some("Keep notes.")));
    session.shutdown().await;
    let lock = std::fs::read_to_string(cap.path().join("murmur.lock")).expect("the first launch wrote the lock");
    let parsed = capsule_protocol::lockfile::Lock::parse(&lock).expect("a lock Murmur reads");
    let entry = parsed.entry("notes").expect("entry");
    assert_eq!((entry.resolved_version.as_str(), entry.sha256.wasm.as_str()), ("0.2.0", sum.as_str()));
    assert!(parsed.entry("anthropic").is_none(), "artifacts with a source are not locked");

    // The lock pins the hash: a lock that disagrees, or a package changed after install, is refused.
    std::fs::write(cap.path().join("murmur.lock"), lock.replace(&sum, &"0".repeat(64))).expect("edit");
    let e = cap.launch().await.err().expect("refused").to_string();
    assert!(e.starts_with("E-CAP-010") && e.contains("murmur.lock pins"), "{e}");
    std::fs::write(cap.path().join("murmur.lock"), &lock).expect("restore");
    let zip = store.join("notes-0.2.0.mur.zip");
    let mut bytes = std::fs::read(&zip).expect("zip");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&zip, bytes).expect("tamper");
    let e = cap.launch().await.err().expect("refused").to_string();
    assert!(e.starts_with("E-CAP-010") && e.contains(".sha256"), "{e}");
}

#[test]
fn a_package_with_an_escaping_entry_and_a_bare_name_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("murmur.yaml"), "name: p\n").expect("project");
    let evil = dir.path().join("evil-1.0.mur.zip");
    let mut w = zip::ZipWriter::new(std::fs::File::create(&evil).expect("file"));
    for (name, body) in [("murmur.yaml", "name: evil\nversion: '1.0'\nruntime: tool\n"), ("../../escape.wasm", "x")] {
        w.start_file(name, zip::write::SimpleFileOptions::default()).expect("entry");
        w.write_all(body.as_bytes()).expect("write");
    }
    w.finish().expect("zip");
    let project = dir.path().display().to_string();
    let (ok, _, stderr) = install(&[evil.to_str().expect("path"), "--project", &project]);
    assert!(!ok && stderr.contains("E-CAP-011") && stderr.contains("../../escape.wasm"), "{stderr}");
    assert!(!dir.path().join(".murmur").exists(), "nothing installed");
    assert!(!dir.path().parent().expect("parent").join("escape.wasm").exists());
    let (ok, _, stderr) = install(&["web-fetch", "--project", &project]);
    assert!(!ok && stderr.contains("no network registry"), "{stderr}");
}
