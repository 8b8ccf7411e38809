//! Probes that need a launched session: the layout (no session file in any scope), the host
//! never writing through a planted link, resume refusing planted files, scope symlinks,
//! and the `capsule control` client refusing a foreign door.

use crate::common::*;
use crate::probes::{Tree, Verdict, escape_call};
use capsule_actors::Session;
use capsule_protocol::Code;
use capsule_stub::Turn;
use serde_json::json;
use std::collections::HashMap;
use std::path::Path;

fn escape_source() -> String {
    dist("guest-escape").display().to_string()
}

/// A capsule with the Anthropic driver (to `endpoint`) and guest-escape tools named by
/// `tools` (`name: scope`), plus `extra` YAML.
fn capsule(endpoint: &str, tools: &[(&str, &str)], extra: &str) -> Capsule {
    let mut y = format!(
        "name: escape\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{endpoint}', keyless: true}}}}\n"
    );
    for (name, scope) in tools {
        y.push_str(&format!(
            "  - {{name: {name}, runtime: tool, source: '{}', capabilities: {{filesystem: {{scope: '{scope}'}}}}}}\n",
            escape_source()
        ));
    }
    y.push_str("inference: {model: claude-test, driver: {artifact: anthropic}}\n");
    y.push_str(extra);
    Capsule::new(&y)
}

const WITH_CONTROL: &str = "control: {settings: [inference.max_tokens]}\n";

pub async fn artifact_scope_refused(scope: &str) -> Verdict {
    let cap = capsule("http://127.0.0.1:9", &[], "");
    let folder = cap.path().join("evil");
    std::fs::create_dir(&folder).expect("mkdir");
    std::fs::copy(dist("guest-escape"), folder.join("evil.wasm")).expect("copy");
    std::fs::write(
        folder.join("murmur.yaml"),
        format!("name: evil\nruntime: tool\nmodule: evil.wasm\ncapabilities: {{filesystem: {{scope: '{scope}'}}}}\n"),
    )
    .expect("write");
    let manifest = std::fs::read_to_string(cap.path().join("murmur.yaml")).expect("read");
    let manifest = manifest.replace(
        "inference:",
        "  - {name: evil, runtime: tool, source: evil, capabilities: {filesystem: {scope: sandbox}}}\ninference:",
    );
    std::fs::write(cap.path().join("murmur.yaml"), manifest).expect("write");
    match cap.launch().await {
        Ok(s) => {
            s.shutdown().await;
            Verdict::escaped(format!("an artifact scope of `{scope}` was accepted"))
        }
        Err(e) if e.code() == Code::ManifestCapability => Verdict::held(e.to_string()),
        Err(e) => Verdict::escaped(format!("refused, but not with E-MAN-008: {e}")),
    }
}

pub async fn capsule_scope_refused(scope: &str) -> Verdict {
    let cap = capsule("http://127.0.0.1:9", &[("t", scope)], "");
    match cap.launch().await {
        Ok(s) => {
            s.shutdown().await;
            Verdict::escaped(format!("a scope of `{scope}` was accepted"))
        }
        Err(e) if e.code() == Code::ManifestCapability => Verdict::held(e.to_string()),
        Err(e) => Verdict::escaped(format!("refused, but not with E-MAN-008: {e}")),
    }
}

/// Launch a session with control on and a `.`-scoped escape tool, and return the session and
/// the grants its tool runs with.
async fn dot_session() -> (Capsule, Session, capsule_runtime::Grants) {
    let cap = capsule("http://127.0.0.1:9", &[("dot", ".")], WITH_CONTROL);
    let session = cap.launch().await.expect("launch");
    let prepared = capsule_actors::launch::prepare(&cap.options(HashMap::new()), "ses_probe").expect("prepare");
    let grants = prepared.artifacts.iter().find(|a| a.decl.name == "dot").expect("dot").grants.clone();
    (cap, session, grants)
}

pub async fn dot_tool_sees_no_session_files() -> Verdict {
    let (_cap, session, grants) = dot_session().await;
    let mut seen = Vec::new();
    for path in [".", "..", "../.."] {
        if let Ok(r) = escape_call(&grants, json!({"op": "list", "path": path})).await.result {
            seen.push(format!("{path}: {}", r.data.unwrap_or_default().replace('\n', ",")));
        }
    }
    session.shutdown().await;
    let all = seen.join("; ");
    if all.contains("ses_") || all.contains("control.token") || all.contains("trace.jsonl") {
        return Verdict::escaped(format!("session files visible: {all}"));
    }
    Verdict::held(format!("listings: {all}"))
}

pub async fn control_token_unreachable() -> Verdict {
    let (cap, session, grants) = dot_session().await;
    let id = session.session_id.clone();
    let token = std::fs::read_to_string(session.dir.join("control.token")).expect("token exists");
    let abs = session.dir.join("control.token").display().to_string();
    let mut tried = Vec::new();
    for path in
        [format!("../{id}/control.token"), format!("../../work/{id}/control.token"), abs, format!("{id}/control.token")]
    {
        let r = escape_call(&grants, json!({"op": "read", "path": path})).await.result;
        if let Ok(r) = &r
            && r.data.as_deref().is_some_and(|d| d.contains(token.trim()))
        {
            session.shutdown().await;
            return Verdict::escaped(format!("read the control token through {path}"));
        }
        tried.push(path);
    }
    session.shutdown().await;
    drop(cap);
    Verdict::held(format!("{} paths to the token refused", tried.len()))
}

pub async fn planted_result_symlink() -> Verdict {
    let stub = stub(vec![Turn::text("the final answer")]);
    let cap = capsule(&stub.url(), &[], "");
    let t = Tree::new();
    let victim = t.root().join("outside.txt");
    let session = cap.launch().await.expect("launch");
    std::os::unix::fs::symlink(&victim, session.dir.join("out/result.txt")).expect("plant");
    let (outcome, _) = run_task(&session, "hi").await;
    session.shutdown().await;
    let after = std::fs::read_to_string(&victim).unwrap_or_default();
    if after != crate::probes::SECRET {
        return Verdict::escaped(format!("the host wrote through the planted link: {after:?}"));
    }
    Verdict::held(format!("task {:?}; the file behind the link is untouched", outcome.exit_status))
}

pub enum Plant {
    Symlink,
    Hardlink,
}

pub async fn resume_refuses(plant: Plant) -> Verdict {
    let cap = capsule("http://127.0.0.1:9", &[], "");
    let session = cap.launch().await.expect("launch");
    let dir = session.dir.clone();
    session.shutdown().await;
    let t = Tree::new();
    let victim = t.root().join("outside.txt");
    let file = match plant {
        Plant::Symlink => "conversation.jsonl",
        Plant::Hardlink => "trace.jsonl",
    };
    let _ = std::fs::remove_file(dir.join(file));
    match plant {
        Plant::Symlink => std::os::unix::fs::symlink(&victim, dir.join(file)).expect("symlink"),
        Plant::Hardlink => {
            // A hard link must stay on one file system: plant it next to the session folder.
            let beside = dir.parent().expect("parent").join("victim.jsonl");
            std::fs::write(&beside, "{}\n").expect("victim");
            std::fs::hard_link(&beside, dir.join(file)).expect("hardlink");
        }
    }
    match Session::resume(cap.options(HashMap::new()), &dir).await {
        Ok(s) => {
            s.shutdown().await;
            Verdict::escaped(format!("resume accepted a planted {file}"))
        }
        Err(e) if e.code() == Code::SessionFileRefused => Verdict::held(e.to_string()),
        Err(e) => Verdict::escaped(format!("refused, but not with E-RUN-062: {e}")),
    }
}

pub async fn planted_door_url() -> Verdict {
    let cap = capsule("http://127.0.0.1:9", &[], "");
    let session = cap.launch().await.expect("launch");
    let t = Tree::new();
    let victim = t.root().join("outside.txt");
    std::os::unix::fs::symlink(&victim, session.dir.join("door.url")).expect("plant");
    let r = session.record_door("http://127.0.0.1:1234");
    session.shutdown().await;
    let after = std::fs::read_to_string(&victim).unwrap_or_default();
    match r {
        Ok(()) => Verdict::escaped("door.url was written through a planted link"),
        Err(_) if after != crate::probes::SECRET => Verdict::escaped(format!("the victim changed: {after:?}")),
        Err(e) => Verdict::held(e.to_string()),
    }
}

pub async fn swapped_scope() -> Verdict {
    let cap = capsule("http://127.0.0.1:9", &[("dot", "."), ("data", "data")], "");
    let prepared = capsule_actors::launch::prepare(&cap.options(HashMap::new()), "ses_probe").expect("prepare");
    let grants = |n: &str| prepared.artifacts.iter().find(|a| a.decl.name == n).expect("tool").grants.clone();
    let dot = grants("dot");
    let removed = escape_call(&dot, json!({"op": "rmdir", "path": "data"})).await.result;
    let linked = escape_call(&dot, json!({"op": "symlink", "target": "/", "link": "data"})).await.result;
    let made_by = if matches!(&linked, Ok(r) if r.status == capsule_runtime::ToolStatus::Passed) {
        "the guest"
    } else {
        // The guest could not make it (WASI refuses absolute targets); plant it host-side, as
        // any other writer of the workdir could.
        let data = prepared.files.join("data");
        let _ = std::fs::remove_dir(&data);
        std::os::unix::fs::symlink("/", &data).expect("plant");
        "the host side"
    };
    let out = escape_call(&grants("data"), json!({"op": "list", "path": "."})).await.result;
    match out {
        Err(e @ capsule_runtime::CallError::Scope { .. }) if e.to_string().starts_with("E-RUN-034") => {
            Verdict::held(format!("link made by {made_by} (rmdir: {}); {e}", removed.is_ok()))
        }
        Ok(r) if r.data.as_deref().is_some_and(|d| d.lines().any(|l| l == "proc" || l == "etc")) => {
            Verdict::escaped(format!("the data tool listed the host root: {:?}", r.data))
        }
        other => Verdict::escaped(format!("expected E-RUN-034, got {other:?}")),
    }
}

pub async fn host_side_symlink_scope() -> Verdict {
    let cap = capsule("http://127.0.0.1:9", &[("data", "data")], "");
    std::fs::create_dir_all(cap.workdir.join("files")).expect("mkdir");
    std::os::unix::fs::symlink("/", cap.workdir.join("files/data")).expect("plant");
    match cap.launch().await {
        Ok(s) => {
            s.shutdown().await;
            Verdict::escaped("a scope that is a symlink to / was accepted")
        }
        Err(e) if e.code() == Code::SessionFileRefused => Verdict::held(e.to_string()),
        Err(e) => Verdict::escaped(format!("refused, but not with E-RUN-062: {e}")),
    }
}

pub async fn control_refuses_foreign_door() -> Verdict {
    let t = Tree::new();
    let dir = t.root().join("ses_fake");
    std::fs::create_dir(&dir).expect("mkdir");
    std::fs::write(dir.join("control.token"), "tok").expect("token");
    let mut held = Vec::new();
    // 0.0.0.0 is not loopback by rule, yet would reach this machine if dialled; no traffic
    // ever leaves it.
    for door in ["http://0.0.0.0:9", "http://user@127.0.0.1:9", "https://127.0.0.1:9"] {
        std::fs::write(dir.join("door.url"), door).expect("door.url");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
            .args(["control", "show"])
            .arg(&dir)
            .output()
            .expect("runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        if out.status.code() != Some(2) || !stderr.contains("loopback") {
            return Verdict::escaped(format!("{door}: exit {:?}, {stderr}", out.status.code()));
        }
        held.push(door);
    }
    Verdict::held(format!("refused: {held:?}"))
}

fn mode(p: &Path) -> u32 {
    std::os::unix::fs::PermissionsExt::mode(&std::fs::symlink_metadata(p).expect("meta").permissions()) & 0o777
}

pub async fn session_files_private() -> Verdict {
    let stub = stub(vec![Turn::text("done")]);
    let cap = capsule(&stub.url(), &[], WITH_CONTROL);
    let session = cap.launch().await.expect("launch");
    run_task(&session, "hi").await;
    session.record_door("http://127.0.0.1:1").expect("door.url");
    session.shutdown().await;
    let mut bad = Vec::new();
    let mut checked = 0;
    let mut folders = vec![cap.workdir.clone()];
    while let Some(f) = folders.pop() {
        if mode(&f) != 0o700 {
            bad.push(format!("{} {:o}", f.display(), mode(&f)));
        }
        for e in std::fs::read_dir(&f).expect("dir").flatten() {
            let p = e.path();
            checked += 1;
            if p.is_dir() {
                folders.push(p);
            } else if mode(&p) != 0o600 {
                bad.push(format!("{} {:o}", p.display(), mode(&p)));
            }
        }
    }
    if bad.is_empty() {
        Verdict::held(format!("{checked} entries: files 0600, folders 0700"))
    } else {
        Verdict::escaped(format!("readable by others: {bad:?}"))
    }
}
