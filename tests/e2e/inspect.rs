//! `capsule check`, `capsule ps` and `capsule completions`: the commands that look without
//! running, driven as a user would, through the real binary.

use crate::common::*;
use capsule_stub::Turn;
use serde_json::Value;
use std::process::{Command, Output};

fn capsule(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(args)
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .output()
        .expect("capsule runs")
}

#[test]
fn check_accepts_a_capsule_that_would_launch_refuses_one_that_would_not_and_writes_nothing() {
    let good = anthropic_capsule("http://127.0.0.1:9", &[("files", "{DIST}/tool-files.wasm")], "");
    let out = capsule(&["check", &good.path().display().to_string(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let v: Value = serde_json::from_slice(&out.stdout).expect("json");
    assert_eq!((v["ok"].as_bool(), &v["tools"]), (Some(true), &serde_json::json!(["files"])), "{v}");
    let listing: Vec<String> = std::fs::read_dir(good.path())
        .expect("folder")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    assert!(!listing.iter().any(|n| n.contains("work")), "check made no work folder: {listing:?}");
    assert!(!good.workdir.exists(), "nor the capsule's workdir");

    let bad = Capsule::new("name: Bad Name\nartifacts: []\ninference: {model: m, driver: {artifact: d}}\n");
    let out = capsule(&["check", &bad.path().display().to_string()]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("E-MAN-"), "the refusal has its code: {stderr}");

    let out = capsule(&["check", &good.path().display().to_string(), "--endpoint", "http://10.0.0.1", "--keyless"]);
    assert!(String::from_utf8_lossy(&out.stderr).contains("E-MAN-007 at --endpoint"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ps_lists_each_session_with_its_state_and_the_path_resume_takes() {
    let stub = stub(vec![Turn::text("one"), Turn::text("two")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    session.submit("first").await.expect("outcome");
    let ended = session.dir.clone();
    session.shutdown().await;
    // A copy cut before its task ended stands for a process killed mid-task.
    let cut = cap.workdir.join("ses_0000cut");
    std::fs::create_dir_all(&cut).expect("mkdir");
    let trace = std::fs::read_to_string(ended.join("trace.jsonl")).expect("trace");
    let head: Vec<&str> = trace.lines().take_while(|l| !l.contains("\"task_end\"")).collect();
    std::fs::write(cut.join("trace.jsonl"), head.join("\n") + "\n").expect("write");

    let out = capsule(&["ps", &cap.workdir.display().to_string(), "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rows: Vec<Value> =
        String::from_utf8_lossy(&out.stdout).lines().map(|l| serde_json::from_str(l).expect("json line")).collect();
    assert_eq!(rows.len(), 2, "{rows:?}");
    let state_of = |path: &std::path::Path| {
        rows.iter()
            .find(|r| r["path"].as_str().map(std::path::PathBuf::from).as_deref() == Some(path))
            .map(|r| r["state"].as_str().unwrap_or("").to_string())
    };
    assert_eq!(state_of(&ended).as_deref(), Some("ended"));
    assert_eq!(state_of(&cut).as_deref(), Some("interrupted"));
    let human = capsule(&["ps", &cap.workdir.display().to_string()]);
    assert!(String::from_utf8_lossy(&human.stdout).contains("capsule run --resume"), "the hint for a resumable one");
}

#[test]
fn completions_are_printed_for_each_shell() {
    for shell in ["bash", "zsh", "fish"] {
        let out = capsule(&["completions", shell]);
        assert!(out.status.success());
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("capsule") && text.contains("resume"), "{shell}: {}", &text[..text.len().min(200)]);
    }
}
