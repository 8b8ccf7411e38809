//! The component cache folder across launches: loading a `.cwasm` marks it used, and a launch
//! that compiles and writes one removes those no launch has used for 30 days
//! (`runtime/src/cache_prune.rs`). Real components, real `.cwasm` files, two hosts in turn as
//! two launches would make them.

use crate::common::dist;
use capsule_runtime::{CacheHit, Host, HostOptions, LoadedArtifact};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

const DAY: Duration = Duration::from_secs(24 * 3600);

/// Make `path`'s modification time `age` ago.
fn set_age(path: &Path, age: Duration) {
    std::fs::File::options()
        .write(true)
        .open(path)
        .expect("open")
        .set_modified(SystemTime::now() - age)
        .expect("set mtime");
}

fn age(path: &Path) -> Duration {
    let modified = std::fs::metadata(path).expect("meta").modified().expect("mtime");
    SystemTime::now().duration_since(modified).unwrap_or_default()
}

fn cwasm_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .expect("cache dir")
        .map(|e| e.expect("entry").path())
        .filter(|p| p.extension().is_some_and(|x| x == "cwasm"))
        .collect();
    files.sort();
    files
}

#[tokio::test]
async fn a_launch_that_compiles_removes_cache_files_unused_for_30_days() {
    let cache = tempfile::tempdir().expect("cache");
    let launch = || Host::new(HostOptions { cache_dir: Some(cache.path().to_path_buf()) }).expect("host");
    let load = |h: &Host| LoadedArtifact::load_file(h, "files", &dist("tool-files")).expect("loads").cache_hit;

    // What an older build or runtime left: one file unused for 31 days, one used 10 days ago.
    std::fs::create_dir_all(cache.path()).expect("mkdir");
    let stale = cache.path().join(format!("{}-{}.cwasm", "a".repeat(64), "0".repeat(16)));
    let recent = cache.path().join(format!("{}-{}.cwasm", "b".repeat(64), "0".repeat(16)));
    for (path, days) in [(&stale, 31), (&recent, 10)] {
        std::fs::write(path, b"old code").expect("write");
        set_age(path, days * DAY);
    }

    assert_eq!(load(&launch()), CacheHit::Compiled);
    let files = cwasm_files(cache.path());
    assert!(!stale.exists(), "a file unused for 31 days is removed when a launch writes a new one: {files:?}");
    assert!(recent.exists(), "a file used 10 days ago stays");
    let ours: Vec<&PathBuf> = files.iter().filter(|p| **p != recent).collect();
    let [ours] = ours.as_slice() else { panic!("expected the new .cwasm beside the recent one: {files:?}") };

    // Two days without a launch, then one that loads it from disk: it is marked used again. A
    // launch that only loads does not scan the folder, so the other file, now past 30 days,
    // stays until a launch writes.
    set_age(ours, 2 * DAY);
    set_age(&recent, 31 * DAY);
    assert_eq!(load(&launch()), CacheHit::Disk);
    assert!(age(ours) < Duration::from_secs(3600), "a load marks its file used: {:?} old", age(ours));
    assert!(recent.exists(), "a launch that only loads removes nothing");
}

/// The session's `session_start` record: each artifact's name and where its code came from.
pub(crate) fn cache_sources(trace: &str) -> Vec<(String, String)> {
    let start: serde_json::Value = trace
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).expect("trace line is JSON"))
        .find(|e| e["event_type"] == "session_start")
        .expect("a session_start record");
    let artifacts = start["artifacts"].as_array().cloned().unwrap_or_default();
    artifacts
        .iter()
        .map(|a| {
            (a["name"].as_str().unwrap_or_default().to_string(), a["cache"].as_str().unwrap_or_default().to_string())
        })
        .collect()
}

/// `capsule demo` (the hello capsule: a driver and the `files` tool, one tool call) with the
/// cache folder `cache`; returns its trace.
fn demo_with_cache(cache: &Path) -> String {
    let work = tempfile::tempdir().expect("workdir");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .current_dir(crate::common::repo())
        .args(["demo", "--json", "--workdir"])
        .arg(work.path())
        .env("CAPSULE_CACHE_DIR", cache)
        .output()
        .expect("runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "demo failed: {stdout}\n{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(work.path().join("files/hello.txt")).expect("the tool ran and wrote its file"),
        "Hello from a Murmur capsule!\n"
    );
    let ready: serde_json::Value = serde_json::from_str(stdout.lines().next().expect("ready")).expect("json");
    let session = ready["session_id"].as_str().expect("session id");
    std::fs::read_to_string(work.path().join(session).join("trace.jsonl")).expect("trace")
}

#[test]
fn a_cold_launch_compiles_the_tool_in_the_background_and_the_next_launch_finds_both() {
    let cache = tempfile::tempdir().expect("cache");
    let first = cache_sources(&demo_with_cache(cache.path()));
    assert_eq!(
        first,
        [("anthropic".to_string(), "compiled".to_string()), ("files".to_string(), "background".to_string())],
        "the driver is compiled before the session starts, the tool beside it"
    );
    // The process waited for the tool's compile before it exited: both are on disk.
    assert_eq!(cwasm_files(cache.path()).len(), 2, "{:?}", cwasm_files(cache.path()));
    let second = cache_sources(&demo_with_cache(cache.path()));
    assert_eq!(second, [("anthropic".to_string(), "disk".to_string()), ("files".to_string(), "disk".to_string())]);
}
