//! The probes: each runs one attack and says whether the sandbox held. Runtime-level probes
//! call the hostile component directly with the grants a launch builds; session-level ones
//! are in `session_probes`.

use crate::ahead_probes as ap;
use crate::common::*;
use crate::session_probes as sp;
use capsule_protocol::manifest::Limits;
use capsule_runtime::{
    ArtifactRole, CallError, CallOutcome, DiskMeter, Grants, Host, HostOptions, LoadedArtifact, NoEvents,
    OutgoingPolicy, Scope, ToolInput, ToolStatus,
};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// What one probe found.
#[derive(Debug, Default)]
pub struct Verdict {
    /// The sandbox did not hold: something was read, written or reached outside the scope.
    pub escaped: bool,
    /// The probe ended in a coded resource failure (`E-RUN-031`/`E-RUN-033`), as it should.
    pub resource_failure: bool,
    /// What happened.
    pub detail: String,
}

impl Verdict {
    pub fn held(detail: impl Into<String>) -> Verdict {
        Verdict { escaped: false, resource_failure: false, detail: detail.into() }
    }
    pub fn escaped(detail: impl Into<String>) -> Verdict {
        Verdict { escaped: true, resource_failure: false, detail: detail.into() }
    }
    pub fn limited(detail: impl Into<String>) -> Verdict {
        Verdict { escaped: false, resource_failure: true, detail: detail.into() }
    }
}

/// Every probe, in the order the table prints them.
pub const PROBES: &[&str] = &[
    "artifact_scope_with_dotdot_is_refused_at_launch",
    "artifact_scope_absolute_is_refused_at_launch",
    "capsule_scope_with_dotdot_inside_is_refused_at_launch",
    "a_dot_scoped_tool_sees_no_session_files",
    "a_dot_scoped_tool_cannot_reach_the_control_token_by_any_path",
    "a_planted_result_symlink_is_never_written_through",
    "resume_refuses_a_session_folder_with_a_symlinked_journal",
    "resume_refuses_a_hard_linked_journal",
    "a_planted_door_url_is_refused_and_never_followed",
    "a_guest_symlink_swapped_for_another_tools_scope_is_refused",
    "a_host_side_symlink_scope_is_refused_at_launch",
    "capsule_control_refuses_a_non_loopback_door_url",
    "read_etc_shadow",
    "read_an_absolute_host_path",
    "read_the_parent_of_the_scope",
    "write_outside_the_workdir_by_dotdot",
    "write_outside_the_workdir_by_absolute_path",
    "guest_symlink_to_an_absolute_target_is_not_followed",
    "guest_symlink_to_the_parent_is_not_followed",
    "guest_hardlink_to_the_parent_is_refused",
    "rename_across_the_boundary_is_refused",
    "dotdot_in_every_guest_path",
    "descriptor_exhaustion_is_a_coded_limit",
    "disk_fill_in_one_file_is_a_coded_limit",
    "disk_fill_with_pwrite_is_a_coded_limit",
    "disk_fill_in_aggregate_across_calls_is_a_coded_limit",
    "header_field_bloat_is_a_coded_limit_and_the_host_stays_small",
    "memory_hog_is_a_coded_limit",
    "session_files_are_private",
    "a_swapped_cwasm_is_recompiled_not_run",
    "a_call_sees_nothing_an_earlier_call_left_in_memory",
    "an_instance_made_ahead_sees_nothing_an_earlier_call_left_in_memory",
    "a_tool_instance_made_ahead_sees_nothing_an_earlier_call_left_in_memory",
    "a_scope_swapped_for_a_symlink_after_a_tool_instance_was_made_is_refused",
    "a_scope_replaced_by_another_folder_after_a_tool_instance_was_made_gives_the_new_folder",
    "a_tool_instance_made_with_a_folder_serves_no_call_without_one",
    "disk_fill_in_aggregate_across_calls_made_ahead_is_a_coded_limit",
    "a_tool_file_swapped_during_its_background_compile_is_not_run",
];

/// Run the probe called `name`.
pub async fn run(name: &str) -> Verdict {
    match name {
        "artifact_scope_with_dotdot_is_refused_at_launch" => {
            sp::artifact_scope_refused("../../../../../../../..").await
        }
        "artifact_scope_absolute_is_refused_at_launch" => sp::artifact_scope_refused("/").await,
        "capsule_scope_with_dotdot_inside_is_refused_at_launch" => sp::capsule_scope_refused("data/../../..").await,
        "a_dot_scoped_tool_sees_no_session_files" => sp::dot_tool_sees_no_session_files().await,
        "a_dot_scoped_tool_cannot_reach_the_control_token_by_any_path" => sp::control_token_unreachable().await,
        "a_planted_result_symlink_is_never_written_through" => sp::planted_result_symlink().await,
        "resume_refuses_a_session_folder_with_a_symlinked_journal" => sp::resume_refuses(sp::Plant::Symlink).await,
        "resume_refuses_a_hard_linked_journal" => sp::resume_refuses(sp::Plant::Hardlink).await,
        "a_planted_door_url_is_refused_and_never_followed" => sp::planted_door_url().await,
        "a_guest_symlink_swapped_for_another_tools_scope_is_refused" => sp::swapped_scope().await,
        "a_host_side_symlink_scope_is_refused_at_launch" => sp::host_side_symlink_scope().await,
        "capsule_control_refuses_a_non_loopback_door_url" => sp::control_refuses_foreign_door().await,
        "read_etc_shadow" => read_denied("/etc/shadow").await,
        "read_an_absolute_host_path" => read_denied("/etc/passwd").await,
        "read_the_parent_of_the_scope" => read_denied("../outside.txt").await,
        "write_outside_the_workdir_by_dotdot" => write_denied("../planted.txt").await,
        "write_outside_the_workdir_by_absolute_path" => write_denied("/tmp/capsule-escape-planted.txt").await,
        "guest_symlink_to_an_absolute_target_is_not_followed" => symlink_not_followed(true).await,
        "guest_symlink_to_the_parent_is_not_followed" => symlink_not_followed(false).await,
        "guest_hardlink_to_the_parent_is_refused" => hardlink_refused().await,
        "rename_across_the_boundary_is_refused" => rename_refused().await,
        "dotdot_in_every_guest_path" => dotdot_everywhere().await,
        "descriptor_exhaustion_is_a_coded_limit" => descriptors().await,
        "disk_fill_in_one_file_is_a_coded_limit" => disk_fill(false).await,
        "disk_fill_with_pwrite_is_a_coded_limit" => disk_fill(true).await,
        "disk_fill_in_aggregate_across_calls_is_a_coded_limit" => disk_aggregate().await,
        "header_field_bloat_is_a_coded_limit_and_the_host_stays_small" => header_bloat().await,
        "memory_hog_is_a_coded_limit" => memory_hog().await,
        "session_files_are_private" => sp::session_files_private().await,
        "a_swapped_cwasm_is_recompiled_not_run" => swapped_cwasm().await,
        "a_call_sees_nothing_an_earlier_call_left_in_memory" => memory_residue().await,
        "an_instance_made_ahead_sees_nothing_an_earlier_call_left_in_memory" => ap::residue_made_ahead().await,
        "a_tool_instance_made_ahead_sees_nothing_an_earlier_call_left_in_memory" => ap::tool_residue_made_ahead().await,
        "a_scope_swapped_for_a_symlink_after_a_tool_instance_was_made_is_refused" => {
            ap::swapped_scope_made_ahead().await
        }
        "a_scope_replaced_by_another_folder_after_a_tool_instance_was_made_gives_the_new_folder" => {
            ap::replaced_scope_made_ahead().await
        }
        "a_tool_instance_made_with_a_folder_serves_no_call_without_one" => {
            ap::folder_made_ahead_serves_no_call_without_one().await
        }
        "disk_fill_in_aggregate_across_calls_made_ahead_is_a_coded_limit" => ap::disk_aggregate_made_ahead().await,
        "a_tool_file_swapped_during_its_background_compile_is_not_run" => {
            crate::later_probes::swapped_during_background_compile().await
        }
        other => Verdict::escaped(format!("no probe named {other}")),
    }
}

/// A scratch tree: `root/outside.txt` (a secret) and `root/files/` (the tools' workdir).
pub struct Tree {
    pub dir: tempfile::TempDir,
}

pub const SECRET: &str = "secret outside the scope";

impl Tree {
    pub fn new() -> Tree {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(dir.path().join("outside.txt"), SECRET).expect("write");
        std::fs::create_dir(dir.path().join("files")).expect("mkdir");
        Tree { dir }
    }
    pub fn root(&self) -> &Path {
        self.dir.path()
    }
    pub fn files(&self) -> PathBuf {
        self.dir.path().join("files")
    }
    pub fn grants(&self, limits: Limits, disk: DiskMeter) -> Grants {
        Grants {
            role: ArtifactRole::Tool,
            env: Vec::new().into(),
            preopen: Some(Scope { workdir: self.files(), relative: ".".into() }),
            limits,
            policy: OutgoingPolicy::default(),
            disk,
        }
    }
}

/// Call `guest-escape` once with `input`.
pub async fn escape_call(grants: &Grants, input: Value) -> CallOutcome {
    let host = host();
    let a = LoadedArtifact::load_file(&host, "escape", &dist("guest-escape")).expect("loads");
    a.call(&host, grants, Arc::new(NoEvents), ToolInput { data: Some(input.to_string()), log_path: None }).await
}

async fn op(t: &Tree, input: Value) -> (bool, String) {
    match escape_call(&t.grants(Limits::default(), DiskMeter::default()), input).await.result {
        Ok(r) => (r.status == ToolStatus::Passed, format!("{:?} {:?}", r.summary, r.data)),
        Err(e) => (false, e.to_string()),
    }
}

async fn read_denied(path: &str) -> Verdict {
    let t = Tree::new();
    let (ok, what) = op(&t, json!({"op": "read", "path": path})).await;
    if ok {
        Verdict::escaped(format!("read {path}: {what}"))
    } else {
        Verdict::held(format!("read {path} refused: {what}"))
    }
}

async fn write_denied(path: &str) -> Verdict {
    let t = Tree::new();
    let target = if path.starts_with('/') { PathBuf::from(path) } else { t.root().join("planted.txt") };
    let _ = std::fs::remove_file(&target);
    let (ok, what) = op(&t, json!({"op": "write", "path": path, "text": "planted"})).await;
    if ok || target.exists() {
        let _ = std::fs::remove_file(&target);
        Verdict::escaped(format!("wrote {path}: {what}"))
    } else {
        Verdict::held(format!("write {path} refused: {what}"))
    }
}

async fn symlink_not_followed(absolute: bool) -> Verdict {
    let t = Tree::new();
    let target = if absolute { t.root().join("outside.txt").display().to_string() } else { "../outside.txt".into() };
    let (made, how) = op(&t, json!({"op": "symlink", "target": target, "link": "l"})).await;
    let (ok, what) = op(&t, json!({"op": "read", "path": "l"})).await;
    if ok || what.contains(SECRET) {
        return Verdict::escaped(format!("read through a guest symlink to {target}: {what}"));
    }
    Verdict::held(format!("symlink made: {made} ({how}); reading through it refused: {what}"))
}

async fn hardlink_refused() -> Verdict {
    let t = Tree::new();
    let (ok, what) = op(&t, json!({"op": "hardlink", "old": "../outside.txt", "new": "h"})).await;
    if ok || t.files().join("h").exists() {
        return Verdict::escaped(format!("hard-linked a file outside the scope: {what}"));
    }
    Verdict::held(format!("hard link refused: {what}"))
}

async fn rename_refused() -> Verdict {
    let t = Tree::new();
    let (_, _) = op(&t, json!({"op": "write", "path": "in.txt", "text": "x"})).await;
    let (out, what_out) = op(&t, json!({"op": "rename", "old": "in.txt", "new": "../moved.txt"})).await;
    let (inn, what_in) = op(&t, json!({"op": "rename", "old": "../outside.txt", "new": "stolen.txt"})).await;
    if out || inn || t.root().join("moved.txt").exists() || t.files().join("stolen.txt").exists() {
        return Verdict::escaped(format!("rename crossed the boundary: out {what_out}; in {what_in}"));
    }
    Verdict::held(format!("out: {what_out}; in: {what_in}"))
}

async fn dotdot_everywhere() -> Verdict {
    let t = Tree::new();
    let paths = ["..", "../x", "a/../../x", "./../x", "../files/../outside.txt"];
    let mut tried = 0;
    for p in paths {
        let inputs = [
            json!({"op": "read", "path": p}),
            json!({"op": "write", "path": p, "text": "x"}),
            json!({"op": "list", "path": p}),
            json!({"op": "mkdir", "path": p}),
            json!({"op": "remove", "path": p}),
            json!({"op": "rmdir", "path": p}),
            json!({"op": "symlink", "target": "x", "link": p}),
            json!({"op": "hardlink", "old": "x", "new": p}),
            json!({"op": "rename", "old": "x", "new": p}),
            json!({"op": "fill", "path": p, "bytes": 10, "chunk": 10}),
        ];
        for input in inputs {
            tried += 1;
            let (ok, what) = op(&t, input.clone()).await;
            if ok {
                return Verdict::escaped(format!("{input} succeeded: {what}"));
            }
        }
    }
    let entries: Vec<_> = std::fs::read_dir(t.root()).expect("root").flatten().map(|e| e.file_name()).collect();
    if entries.len() != 2 || std::fs::read_to_string(t.root().join("outside.txt")).ok().as_deref() != Some(SECRET) {
        return Verdict::escaped(format!("the tree outside the scope changed: {entries:?}"));
    }
    Verdict::held(format!("{tried} path-taking calls with `..` refused"))
}

pub fn host_limit(e: &CallError, key: &str) -> bool {
    matches!(e, CallError::HostLimit { key: k, .. } if *k == key) && e.to_string().starts_with("E-RUN-033")
}

async fn descriptors() -> Verdict {
    let t = Tree::new();
    let out =
        escape_call(&t.grants(Limits::default(), DiskMeter::default()), json!({"op": "open_many", "count": 1_000_000}))
            .await;
    match out.result {
        Err(e) if host_limit(&e, "resources") => Verdict::limited(e.to_string()),
        other => Verdict::escaped(format!("expected E-RUN-033 resources, got {other:?}")),
    }
}

pub const MIB: u64 = 1024 * 1024;

async fn disk_fill(pwrite: bool) -> Verdict {
    let t = Tree::new();
    let limits = Limits { disk_bytes: MIB, ..Limits::default() };
    let input = json!({"op": "fill", "path": "big", "bytes": 64 * MIB, "chunk": 64 * 1024, "pwrite": pwrite});
    let out = escape_call(&t.grants(limits, DiskMeter::default()), input).await;
    let size = std::fs::metadata(t.files().join("big")).map(|m| m.len()).unwrap_or(0);
    match out.result {
        Err(e) if host_limit(&e, "disk_bytes") && size <= MIB => {
            Verdict::limited(format!("{e} (file holds {size} bytes)"))
        }
        other => {
            Verdict::escaped(format!("expected E-RUN-033 disk_bytes with ≤ 1 MiB written, got {other:?}, {size} bytes"))
        }
    }
}

async fn disk_aggregate() -> Verdict {
    let t = Tree::new();
    let limits = Limits { disk_bytes: MIB, ..Limits::default() };
    let meter = DiskMeter::default();
    let g = t.grants(limits, meter.clone());
    let write = |path: &str| json!({"op": "fill", "path": path, "bytes": 700 * 1024, "chunk": 64 * 1024});
    let first = escape_call(&g, write("a")).await.result;
    if !matches!(&first, Ok(r) if r.status == ToolStatus::Passed) {
        return Verdict::escaped(format!("the first call within the budget failed: {first:?}"));
    }
    match escape_call(&g, write("b")).await.result {
        Err(e) if host_limit(&e, "disk_bytes") && meter.written() <= MIB => {
            Verdict::limited(format!("second call: {e}; {} bytes written in all", meter.written()))
        }
        other => Verdict::escaped(format!("expected the second call to hit disk_bytes, got {other:?}")),
    }
}

fn rss_kib() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines().find(|l| l.starts_with("VmRSS:")).and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

async fn header_bloat() -> Verdict {
    let t = Tree::new();
    let before = rss_kib();
    let out = escape_call(
        &t.grants(Limits::default(), DiskMeter::default()),
        json!({"op": "fields", "count": 1_000_000, "size": 16_000}),
    )
    .await;
    let grown_mib = rss_kib().saturating_sub(before) / 1024;
    match out.result {
        Err(e) if host_limit(&e, "resources") && grown_mib < 256 => {
            Verdict::limited(format!("{e}; host RSS grew {grown_mib} MiB"))
        }
        other => Verdict::escaped(format!(
            "expected E-RUN-033 resources with < 256 MiB growth; got {other:?}, {grown_mib} MiB"
        )),
    }
}

async fn memory_hog() -> Verdict {
    let host = host();
    let a = LoadedArtifact::load_file(&host, "balloon", &dist("guest-balloon-memory")).expect("loads");
    let t = Tree::new();
    let limits = Limits { memory_bytes: 64 * MIB, ..Limits::default() };
    let out = a.call(&host, &t.grants(limits, DiskMeter::default()), Arc::new(NoEvents), ToolInput::default()).await;
    match out.result {
        Err(e @ CallError::MemoryLimit { .. }) => {
            Verdict::limited(format!("{e} (every memory of the store counts toward it)"))
        }
        other => Verdict::escaped(format!("expected E-RUN-031, got {other:?}")),
    }
}

/// A freed instance's memory is kept resident for the next call of the same component
/// (`KEEP_RESIDENT`) and reset in place: each call of `guest-escape`'s `residue` probe writes
/// two statics and grown pages, and the next call, in the same pool slot, must find the initial
/// image again. Grown beyond what is kept (32 pages = 2 MiB) and within it (4 pages).
async fn memory_residue() -> Verdict {
    let host = host();
    let a = LoadedArtifact::load_file(&host, "escape", &dist("guest-escape")).expect("loads");
    let t = Tree::new();
    let grants = t.grants(Limits::default(), DiskMeter::default());
    let clean = "data=5eed bss=0 grown_nonzero=0";
    for (i, pages) in [4, 4, 32, 4, 32, 32, 4].into_iter().enumerate() {
        let input = json!({"op": "residue", "pages": pages}).to_string();
        let out = a.call(&host, &grants, Arc::new(NoEvents), ToolInput { data: Some(input), log_path: None }).await;
        match out.result {
            Ok(r) if r.data.as_deref() == Some(clean) => {}
            other => return Verdict::escaped(format!("call {i} ({pages} pages grown) found {other:?}; want {clean}")),
        }
    }
    // The probe is only worth something if the pool did keep the pages it reset.
    match kept_once_idle(&host).await {
        Some(kept) if kept > 0 => {
            Verdict::held(format!("7 calls, each saw the initial image; {kept} bytes kept resident"))
        }
        Some(_) if capsule_runtime::keep_resident() == 0 => {
            Verdict::held("7 calls, each saw the initial image (nothing kept: CAPSULE_KEEP_RESIDENT=0)")
        }
        other => Verdict::escaped(format!(
            "the pool kept nothing resident ({other:?}), so the reset in place was not tested"
        )),
    }
}

/// What the pool's freed memories keep resident, once they keep anything (or at a 10 s
/// deadline). A call with a folder drops its store on the call's own thread after it has
/// answered (`runtime/src/call.rs`), so the last call's slot may still be on its way back to
/// the pool when the caller has the answer.
async fn kept_once_idle(host: &Host) -> Option<usize> {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let kept = host.idle_memory_resident();
        let done = kept.is_some_and(|k| k > 0) || capsule_runtime::keep_resident() == 0;
        if done || tokio::time::Instant::now() >= deadline {
            return kept;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
    }
}

async fn swapped_cwasm() -> Verdict {
    let cache = tempfile::tempdir().expect("cache");
    let open = || Host::new(HostOptions { cache_dir: Some(cache.path().to_path_buf()) }).expect("host");
    let load = |h: &Host, name: &str| LoadedArtifact::load_file(h, name, &dist(name)).expect("loads").cache_hit;
    let h = open();
    load(&h, "tool-files");
    load(&h, "guest-escape");
    let files: Vec<PathBuf> = std::fs::read_dir(cache.path())
        .expect("cache dir")
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    if files.len() != 2 {
        return Verdict::escaped(format!("expected two cached components, found {files:?}"));
    }
    if load(&open(), "tool-files") != capsule_runtime::CacheHit::Disk {
        return Verdict::escaped("an intact .cwasm was not loaded from disk".to_string());
    }
    // Swap another component's valid .cwasm in under tool-files' name: its MAC binds it to its
    // own name, so it must not verify.
    let tool_files_hash = blake3::hash(&std::fs::read(dist("tool-files")).expect("wasm")).to_hex().to_string();
    let (target, other): (Vec<_>, Vec<_>) = files
        .iter()
        .partition(|p| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with(&tool_files_hash)));
    let (Some(target), Some(other)) = (target.first(), other.first()) else {
        return Verdict::escaped(format!("cannot tell the cache files apart: {files:?}"));
    };
    std::fs::copy(other, target).expect("swap");
    let swapped = load(&open(), "tool-files");
    let mut bytes = std::fs::read(target).expect("read");
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0x55;
    std::fs::write(target, &bytes).expect("tamper");
    let tampered = load(&open(), "tool-files");
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(cache.path()).expect("meta").permissions()) & 0o777;
    if swapped != capsule_runtime::CacheHit::Compiled
        || tampered != capsule_runtime::CacheHit::Compiled
        || mode != 0o700
    {
        return Verdict::escaped(format!("swapped: {swapped:?}, tampered: {tampered:?}, cache folder mode {mode:o}"));
    }
    Verdict::held("a swapped and a tampered .cwasm were both recompiled; cache folder 0700")
}
