//! Probes of a component compiled in the background (`runtime/src/later.rs`): what runs is
//! what the launch checked, whatever happens to the file afterwards.

use crate::common::*;
use crate::probes::{Tree, Verdict};
use capsule_protocol::manifest::Limits;
use capsule_runtime::{
    CacheHit, Compile, ComponentKind, DiskMeter, Host, HostOptions, LoadedArtifact, NoEvents, ToolInput, ToolStatus,
};
use std::sync::Arc;

/// A tool left to the background, its file then replaced by the hostile component: the
/// compile must use the bytes the launch read and checked, never reopen the file.
pub async fn swapped_during_background_compile() -> Verdict {
    let cache = tempfile::tempdir().expect("cache");
    let host = Host::new(HostOptions { cache_dir: Some(cache.path().to_path_buf()) }).expect("host");
    let t = Tree::new();
    let source = t.root().join("files.wasm");
    let checked = std::fs::read(dist("tool-files")).expect("wasm");
    std::fs::write(&source, &checked).expect("copy");
    let loaded = LoadedArtifact::load_file_with(&host, "files", &source, ComponentKind::Run, Compile::Background)
        .expect("checks");
    if loaded.cache_hit != CacheHit::Background {
        return Verdict::escaped(format!("expected a compile in the background, got {:?}", loaded.cache_hit));
    }
    let hostile = std::fs::read(dist("guest-escape")).expect("wasm");
    std::fs::write(&source, &hostile).expect("swap");
    let input = serde_json::json!({"op": "write", "path": "a.txt", "content": "from tool-files"}).to_string();
    let grants = t.grants(Limits::default(), DiskMeter::default());
    let out = loaded.call(&host, &grants, Arc::new(NoEvents), ToolInput { data: Some(input), log_path: None }).await;
    let ran_checked = matches!(&out.result, Ok(r) if r.status == ToolStatus::Passed)
        && std::fs::read_to_string(t.files().join("a.txt")).ok().as_deref() == Some("from tool-files");
    capsule_runtime::finish_background_compiles();
    let names: Vec<String> = std::fs::read_dir(cache.path())
        .expect("cache")
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".cwasm"))
        .collect();
    let hash = |b: &[u8]| blake3::hash(b).to_hex().to_string();
    let cached_checked = names.iter().any(|n| n.starts_with(&hash(&checked)));
    let cached_hostile = names.iter().any(|n| n.starts_with(&hash(&hostile)));
    if !ran_checked || !cached_checked || cached_hostile {
        return Verdict::escaped(format!(
            "the call: {:?}; cache: {names:?} (the checked bytes' code there: {cached_checked}, the swapped file's: {cached_hostile})",
            out.result.map(|r| (r.status, r.summary))
        ));
    }
    Verdict::held("the call ran the bytes the launch checked; only their code reached the cache")
}
