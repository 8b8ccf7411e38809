//! Probes of instances made ahead of their call (`runtime/src/ahead.rs` for a driver,
//! `runtime/src/tool_ahead.rs` for a tool): such an instance must hold nothing of an earlier
//! call, and a tool's must get the folder its scope names at the moment of the call.

use crate::common::*;
use crate::probes::{MIB, Tree, Verdict, host_limit};
use capsule_protocol::manifest::Limits;
use capsule_runtime::{Ahead, DiskMeter, Grants, Host, LoadedArtifact, NoEvents, Scope, ToolAhead, ToolInput, Waits};
use serde_json::json;
use std::sync::Arc;

/// The initial image, as `guest-escape`'s `residue` op reports it.
const CLEAN: &str = "data=5eed bss=0 grown_nonzero=0";

/// A wait begins (as a driver's request going out says), and the tool's instance is made in
/// it; false when none is made within 10 s.
async fn made_in_a_wait(waits: &Waits, ahead: &ToolAhead) -> bool {
    waits.out();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !ahead.is_ready() {
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    true
}

/// The same probe through `call_ahead` (as a driver's gateway calls): each call after the
/// first runs in the instance made while the previous call ran (the previous store dropped
/// first, so the instance reuses its reset slot), and must still find the initial image.
pub async fn residue_made_ahead() -> Verdict {
    let host = host();
    let a = LoadedArtifact::load_file(&host, "escape", &dist("guest-escape")).expect("loads");
    let t = Tree::new();
    let grants = Grants { preopen: None, ..t.grants(Limits::default(), DiskMeter::default()) };
    let clean = CLEAN;
    let mut ahead = Ahead::default();
    for (i, pages) in [4, 4, 32, 4, 32, 32, 4].into_iter().enumerate() {
        let input = json!({"op": "residue", "pages": pages}).to_string();
        let input = ToolInput { data: Some(input), log_path: None };
        let out = a.call_ahead(&host, &grants, Arc::new(NoEvents), input, &mut ahead).await;
        if out.made_ahead != (i > 0) {
            return Verdict::escaped(format!(
                "call {i}: made ahead {}, which this probe did not set up",
                out.made_ahead
            ));
        }
        match out.result {
            Ok(r) if r.data.as_deref() == Some(clean) => {}
            other => return Verdict::escaped(format!("call {i} ({pages} pages grown) found {other:?}; want {clean}")),
        }
        if !ahead.settle().await {
            return Verdict::escaped(format!("no instance was made ahead after call {i}"));
        }
    }
    Verdict::held("7 calls, 6 of them in an instance made ahead, each saw the initial image")
}

/// The residue probe through `call_tool_ahead`, for a tool with a folder (as the tools actor
/// calls): every call runs in an instance made in a wait, in the slot the previous call's
/// store left when it was dropped in that wait, and must find the initial image.
pub async fn tool_residue_made_ahead() -> Verdict {
    let host = host();
    let a = LoadedArtifact::load_file(&host, "escape", &dist("guest-escape")).expect("loads");
    let t = Tree::new();
    let grants = t.grants(Limits::default(), DiskMeter::default());
    let waits = Waits::default();
    let mut ahead = ToolAhead::first(&a, &host, &grants, &waits);
    for (i, pages) in [4, 4, 32, 4, 32, 32, 4].into_iter().enumerate() {
        if !made_in_a_wait(&waits, &ahead).await {
            return Verdict::escaped(format!("no instance was made in the wait before call {i}"));
        }
        let input = ToolInput { data: Some(json!({"op": "residue", "pages": pages}).to_string()), log_path: None };
        let out = a.call_tool_ahead(&host, &grants, Arc::new(NoEvents), input, &mut ahead, &waits).await;
        if !out.made_ahead {
            return Verdict::escaped(format!("call {i} did not run in the instance made for it"));
        }
        match out.result {
            Ok(r) if r.data.as_deref() == Some(CLEAN) => {}
            other => return Verdict::escaped(format!("call {i} ({pages} pages grown) found {other:?}; want {CLEAN}")),
        }
    }
    Verdict::held("7 calls of a tool with a folder, each in an instance made in a wait, each saw the initial image")
}

/// `guest-escape` as a tool scoped to the folder `data` of a new tree (made, holding `files`),
/// with its first instance made in a wait.
struct ScopedToData {
    host: Host,
    tool: LoadedArtifact,
    tree: Tree,
    data: std::path::PathBuf,
    grants: Grants,
    waits: Waits,
    ahead: ToolAhead,
}

impl ScopedToData {
    /// `None` when no instance was made in the wait (then nothing after it is tested).
    async fn made(files: &[(&str, &str)]) -> Option<ScopedToData> {
        let host = host();
        let tool = LoadedArtifact::load_file(&host, "escape", &dist("guest-escape")).expect("loads");
        let tree = Tree::new();
        let data = tree.files().join("data");
        std::fs::create_dir(&data).expect("mkdir");
        for (name, text) in files {
            std::fs::write(data.join(name), text).expect("write");
        }
        let grants = Grants {
            preopen: Some(Scope { workdir: tree.files(), relative: "data".into() }),
            ..tree.grants(Limits::default(), DiskMeter::default())
        };
        let waits = Waits::default();
        let ahead = ToolAhead::first(&tool, &host, &grants, &waits);
        made_in_a_wait(&waits, &ahead).await.then_some(ScopedToData { host, tool, tree, data, grants, waits, ahead })
    }

    /// The tool's call with `input`, as the tools actor makes it.
    async fn call(&mut self, input: serde_json::Value) -> capsule_runtime::CallOutcome {
        let input = ToolInput { data: Some(input.to_string()), log_path: None };
        let (host, grants, waits) = (&self.host, &self.grants, &self.waits);
        self.tool.call_tool_ahead(host, grants, Arc::new(NoEvents), input, &mut self.ahead, waits).await
    }
}

/// A tool's instance is made while its folder is still a folder; then the folder is swapped
/// for a symlink to `/` (as another tool, or any writer of the workdir, could). The call in
/// that instance must resolve the folder itself and refuse, never list the host's root.
pub async fn swapped_scope_made_ahead() -> Verdict {
    let Some(mut t) = ScopedToData::made(&[]).await else {
        return Verdict::escaped("no instance was made in the wait, so the swap was not tested");
    };
    std::fs::remove_dir(&t.data).expect("rmdir");
    std::os::unix::fs::symlink("/", &t.data).expect("plant");
    let out = t.call(json!({"op": "list", "path": "."})).await;
    match out.result {
        Err(e @ capsule_runtime::CallError::Scope { .. }) if e.to_string().starts_with("E-RUN-034") => {
            Verdict::held(format!("the instance was made, then the folder swapped; the call refused: {e}"))
        }
        Ok(r) if r.data.as_deref().is_some_and(|d| d.lines().any(|l| l == "proc" || l == "etc")) => {
            Verdict::escaped(format!("the call listed the host root: {:?}", r.data))
        }
        other => Verdict::escaped(format!("expected E-RUN-034, got {other:?}")),
    }
}

/// A tool's instance is made (its folder found) while `data` is one folder; then that folder
/// is moved aside and a new, empty `data` made in its place. The call must get the folder the
/// scope's path names now, never the one the instance was made with: it lists nothing of the
/// old folder, and what it writes lands in the new one.
pub async fn replaced_scope_made_ahead() -> Verdict {
    let Some(mut t) = ScopedToData::made(&[("old-only", "was here")]).await else {
        return Verdict::escaped("no instance was made in the wait, so the replacement was not tested");
    };
    std::fs::rename(&t.data, t.tree.root().join("moved-out")).expect("move aside");
    std::fs::create_dir(&t.data).expect("new folder");
    let out = t.call(json!({"op": "list", "path": "."})).await;
    if !out.made_ahead {
        return Verdict::escaped("the call did not run in the instance made for it, so the replacement was not tested");
    }
    match out.result {
        Ok(r) if r.data.as_deref().is_some_and(|d| d.contains("old-only")) => {
            return Verdict::escaped(format!("the call listed the folder moved out of its scope: {:?}", r.data));
        }
        Ok(_) => {}
        other => return Verdict::escaped(format!("the listing failed: {other:?}")),
    }
    // The next call, also in an instance made in a wait: its write lands in the folder now at
    // the path.
    if !made_in_a_wait(&t.waits, &t.ahead).await {
        return Verdict::escaped("no instance was made in the second wait");
    }
    std::fs::rename(&t.data, t.tree.root().join("moved-again")).expect("move aside");
    std::fs::create_dir(&t.data).expect("newer folder");
    let out = t.call(json!({"op": "write", "path": "marker", "text": "new"})).await;
    let landed = std::fs::read_to_string(t.data.join("marker")).ok();
    let root = t.tree.root();
    let stale = root.join("moved-again/marker").exists() || root.join("moved-out/marker").exists();
    match (out.made_ahead, landed.as_deref(), stale) {
        (true, Some("new"), false) => Verdict::held(
            "folder replaced after the instance was made (twice): the calls listed and wrote the folder at the path now",
        ),
        _ => Verdict::escaped(format!(
            "made ahead {}, marker in the new folder {landed:?}, in a moved-out folder {stale}: {:?}",
            out.made_ahead, out.result
        )),
    }
}

/// A tool's instance is made in a wait with its folder; then a call with the same tool's
/// grants less the folder comes. It must not run in that instance: its guest finds no folder.
pub async fn folder_made_ahead_serves_no_call_without_one() -> Verdict {
    let Some(mut t) = ScopedToData::made(&[("inside", "scoped")]).await else {
        return Verdict::escaped("no instance was made in the wait, so nothing was tested");
    };
    t.grants.preopen = None;
    let out = t.call(json!({"op": "list", "path": "."})).await;
    match (out.made_ahead, out.result) {
        (false, Ok(r)) if !r.data.as_deref().unwrap_or("").contains("inside") => {
            Verdict::held(format!("the call without a folder made its own instance and found none: {:?}", r.summary))
        }
        (made_ahead, other) => {
            Verdict::escaped(format!("made ahead {made_ahead}; a call without a folder got {other:?}"))
        }
    }
}

/// The session's disk budget across calls, each in an instance made in a wait: the instance
/// is made before the call, and the budget it charges must still be the session's one meter.
pub async fn disk_aggregate_made_ahead() -> Verdict {
    let host = host();
    let a = LoadedArtifact::load_file(&host, "escape", &dist("guest-escape")).expect("loads");
    let t = Tree::new();
    let meter = DiskMeter::default();
    let grants = t.grants(Limits { disk_bytes: MIB, ..Limits::default() }, meter.clone());
    let waits = Waits::default();
    let mut ahead = ToolAhead::first(&a, &host, &grants, &waits);
    let mut results = Vec::new();
    for path in ["a", "b"] {
        if !made_in_a_wait(&waits, &ahead).await {
            return Verdict::escaped(format!("no instance was made in the wait before writing {path}"));
        }
        let fill = json!({"op": "fill", "path": path, "bytes": 700 * 1024, "chunk": 64 * 1024});
        let input = ToolInput { data: Some(fill.to_string()), log_path: None };
        let out = a.call_tool_ahead(&host, &grants, Arc::new(NoEvents), input, &mut ahead, &waits).await;
        if !out.made_ahead {
            return Verdict::escaped(format!("writing {path} did not run in the instance made for it"));
        }
        results.push(out.result);
    }
    match (&results[0], &results[1]) {
        (Ok(r), _) if r.status != capsule_runtime::ToolStatus::Passed => {
            Verdict::escaped(format!("the first call within the budget failed: {r:?}"))
        }
        (Ok(_), Err(e)) if host_limit(e, "disk_bytes") && meter.written() <= MIB => {
            Verdict::limited(format!("second call: {e}; {} bytes written in all", meter.written()))
        }
        other => Verdict::escaped(format!("expected the second call to hit disk_bytes, got {other:?}")),
    }
}
