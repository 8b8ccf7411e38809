//! A tool missing from the component cache is compiled on a thread of its own while the
//! session starts (`runtime/src/later.rs`): its first call waits for the compile, a compile
//! that fails refuses its calls with the compile's error, and whatever can be refused without
//! compiling (a missing export, an unknown import, an invalid binary) is still refused at the
//! load. Real components from `components/dist` and hand-written ones, each host with an empty
//! cache folder of its own.

use crate::common::*;
use capsule_protocol::manifest::Limits;
use capsule_runtime::{
    ArtifactRole, CacheHit, CallError, Compile, ComponentKind, Grants, Host, HostOptions, LoadError, LoadedArtifact,
    NoEvents, OutgoingPolicy, Scope, ToolInput, ToolStatus,
};
use std::path::Path;
use std::sync::Arc;

fn empty_cache_host(cache: &Path) -> Host {
    Host::new(HostOptions { cache_dir: Some(cache.to_path_buf()) }).expect("host")
}

fn folder_grants(folder: &Path) -> Grants {
    Grants {
        role: ArtifactRole::Tool,
        env: Vec::new().into(),
        preopen: Some(Scope { workdir: folder.to_path_buf(), relative: ".".into() }),
        limits: Limits::default(),
        policy: OutgoingPolicy::default(),
        disk: Default::default(),
    }
}

fn load_later(host: &Host, name: &str, path: &Path) -> Result<LoadedArtifact, LoadError> {
    LoadedArtifact::load_file_with(host, name, path, ComponentKind::Run, Compile::Background)
}

fn write_input(content: &str) -> ToolInput {
    let data = serde_json::json!({"op": "write", "path": "a.txt", "content": content}).to_string();
    ToolInput { data: Some(data), log_path: None }
}

#[tokio::test]
async fn a_tool_left_to_the_background_runs_at_its_first_call_and_its_code_reaches_the_cache() {
    let cache = tempfile::tempdir().expect("cache");
    let folder = tempfile::tempdir().expect("folder");
    let host = empty_cache_host(cache.path());
    let files = load_later(&host, "files", &dist("tool-files")).expect("checks and validates");
    assert_eq!(files.cache_hit, CacheHit::Background);
    // The same bytes loaded again while that compile runs join it, or (once it has ended)
    // find the code in this process: never a compile of their own.
    let again = load_later(&host, "files", &dist("tool-files")).expect("loads");
    assert!(matches!(again.cache_hit, CacheHit::Background | CacheHit::Memory), "{:?}", again.cache_hit);

    let grants = folder_grants(folder.path());
    for (artifact, content) in [(&files, "first"), (&again, "second")] {
        let out = artifact.call(&host, &grants, Arc::new(NoEvents), write_input(content)).await;
        let r = out.result.expect("the call waits for the compile and runs");
        assert_eq!(r.status, ToolStatus::Passed, "{:?}", r.summary);
        assert_eq!(std::fs::read_to_string(folder.path().join("a.txt")).expect("written"), content);
    }
    assert!(files.is_compiled() && again.is_compiled());
    capsule_runtime::finish_background_compiles();
    let later = empty_cache_host(cache.path());
    let loaded = load_later(&later, "files", &dist("tool-files")).expect("loads");
    assert_eq!(loaded.cache_hit, CacheHit::Disk, "the background compile wrote its .cwasm");
    assert!(loaded.is_compiled());
}

/// A component that passes every check a load makes without compiling (its names, its
/// validation) and still cannot run here: it imports a WASI interface this host does not
/// link.
const UNLINKABLE: &str = r#"(component
  (import "wasi:cli/not-provided@0.2.0" (instance))
  (instance $run)
  (export "murmur:tool/run@0.1.0" (instance $run)))"#;

#[tokio::test]
async fn a_background_compile_that_fails_refuses_every_call_with_its_error() {
    let cache = tempfile::tempdir().expect("cache");
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("unlinkable.wasm");
    std::fs::write(&path, wat::parse_str(UNLINKABLE).expect("wat")).expect("write");
    let host = empty_cache_host(cache.path());

    // Compiled now, the link's failure is the load's own.
    let now = LoadedArtifact::load_file_with(&host, "bad", &path, ComponentKind::Run, Compile::Now)
        .expect_err("cannot be linked");
    assert!(matches!(now, LoadError::Compile { .. }) && now.to_string().starts_with("E-CAP-005"), "{now}");

    let fresh = empty_cache_host(tempfile::tempdir().expect("cache").path());
    let later = load_later(&fresh, "bad", &path).expect("its names and validation pass");
    assert_eq!(later.cache_hit, CacheHit::Background);
    let grants = folder_grants(dir.path());
    for _ in 0..2 {
        let out = later.call(&fresh, &grants, Arc::new(NoEvents), write_input("x")).await;
        let err = out.result.expect_err("refused");
        assert!(matches!(&err, CallError::Compile { artifact, .. } if artifact == "bad"), "{err:?}");
        assert_eq!(err.code().as_str(), "E-CAP-005");
        let cause = std::error::Error::source(&err).map(|s| s.to_string()).unwrap_or_default();
        assert!(
            cause.contains("E-CAP-005") && cause.contains("`bad`"),
            "the compile's own error is the cause: {cause}"
        );
    }
    assert!(!later.is_compiled());
}

#[tokio::test]
async fn what_a_load_can_refuse_without_compiling_is_refused_at_the_load_even_for_the_background() {
    let cache = tempfile::tempdir().expect("cache");
    let host = empty_cache_host(cache.path());
    let missing = load_later(&host, "x", &dist("guest-no-run-export")).expect_err("no run export");
    assert!(matches!(missing, LoadError::MissingExport { .. }), "{missing}");
    let unknown = load_later(&host, "x", &dist("guest-imports-unknown")).expect_err("unknown import");
    assert!(matches!(unknown, LoadError::UnknownImport { .. }), "{unknown}");

    // An invalid body (a function that returns an i32 and leaves nothing) fails validation,
    // so it is compiled now and refused by the compiler, as without the background.
    let dir = tempfile::tempdir().expect("dir");
    let path = dir.path().join("invalid.wasm");
    let invalid = r#"(component
      (core module (func (result i32)))
      (instance $run)
      (export "murmur:tool/run@0.1.0" (instance $run)))"#;
    std::fs::write(&path, wat::parse_str(invalid).expect("wat")).expect("write");
    let refused = load_later(&host, "x", &path).expect_err("invalid");
    assert!(matches!(refused, LoadError::Compile { .. }), "{refused}");
    let cwasm = std::fs::read_dir(cache.path()).expect("cache").filter_map(Result::ok);
    assert_eq!(cwasm.filter(|e| e.path().extension().is_some_and(|x| x == "cwasm")).count(), 0, "nothing was compiled");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_alternate_driver_is_compiled_in_the_background_and_a_switch_to_it_waits_for_it() {
    use crate::control::{SECRET, client_for, switchy};
    let stub = stub(vec![capsule_stub::Turn::text("from the primary"), capsule_stub::Turn::text("from the alternate")]);
    let cap = switchy(&stub.url(), "");
    let cache = tempfile::tempdir().expect("cache");
    let mut opts = cap.options([("PRIMARY_KEY".to_string(), "k-primary".to_string())].into());
    opts.host = empty_cache_host(cache.path());
    let session = Arc::new(capsule_actors::Session::launch(opts).await.expect("launch"));
    let (session, c) = client_for(session);
    assert_eq!(session.submit("one").await.expect("outcome").message, "from the primary");
    // The trace holds the launch's record once the first task is over.
    let trace = std::fs::read_to_string(session.dir.join("trace.jsonl")).expect("trace");
    let sources = crate::component_cache::cache_sources(&trace);
    let named = |n: &str, c: &str| (n.to_string(), c.to_string());
    assert_eq!(
        sources,
        [named("anthropic", "compiled"), named("openai", "background"), named("spin", "background")],
        "the primary driver is compiled before the session starts; the alternate and the tool wait for their first call"
    );

    assert_eq!(c.ok("PUT", "/control/secrets/OPENAI_KEY", Some("text/plain"), SECRET).await.0, 200);
    let body = "{\"value\":\"alt\"}";
    assert_eq!(c.ok("PUT", "/control/settings/inference.driver", Some("application/json"), body).await.0, 200);
    assert_eq!(session.submit("two").await.expect("outcome").message, "from the alternate");
    let paths: Vec<String> = stub.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(paths, ["/v1/messages", "/v1/chat/completions"]);
}

#[test]
fn capsule_check_compiles_what_a_launch_leaves_to_the_background_and_reports_its_failure() {
    let dir = tempfile::tempdir().expect("dir");
    let bad = dir.path().join("unlinkable.wasm");
    std::fs::write(&bad, wat::parse_str(UNLINKABLE).expect("wat")).expect("write");
    let cap = anthropic_capsule("http://127.0.0.1:9", &[("bad", &bad.display().to_string())], "");
    let cache = tempfile::tempdir().expect("cache");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["check", &cap.path().display().to_string()])
        .env("CAPSULE_CACHE_DIR", cache.path())
        .output()
        .expect("runs");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "a tool that cannot be linked fails the check: {stderr}");
    assert!(stderr.contains("E-CAP-005") && stderr.contains("`bad`"), "{stderr}");
}
