//! Bad input gets a coded error that names the problem and says what to do, and never a
//! panic; once a session has started, its trace and result are written all the same.

use crate::common::*;
use capsule_actors::LaunchError;
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;

async fn refused(yaml: &str) -> LaunchError {
    match Capsule::new(yaml).launch().await {
        Err(e) => e,
        Ok(_) => panic!("the capsule should have been refused"),
    }
}

fn with_driver(source: &str) -> String {
    format!(
        "name: bad\nartifacts:\n  - {{name: d, runtime: driver, source: '{source}', gateway: {{endpoint: 'http://127.0.0.1:9', keyless: true}}}}\ninference: {{model: m, driver: {{artifact: d}}}}\n"
    )
}

#[tokio::test]
async fn no_manifest_is_refused_with_e_man_001() {
    let dir = tempfile::tempdir().expect("tempdir");
    let opts = capsule_actors::LaunchOptions {
        cluster: None,
        manifest: dir.path().into(),
        workdir: dir.path().join("w"),
        host: host(),
        env: Default::default(),
        endpoint_override: None,
        machine: None,
        host_config: None,
    };
    let e = capsule_actors::Session::launch(opts).await.err().expect("refused");
    assert_eq!(e.code().as_str(), "E-MAN-001");
    assert!(e.to_string().contains("murmur.yaml"), "{e}");
}

#[tokio::test]
async fn a_yaml_syntax_error_is_refused_with_e_man_002() {
    let e = refused("name: [broken\n").await;
    assert_eq!(e.code().as_str(), "E-MAN-002", "{e}");
}

#[tokio::test]
async fn an_unknown_key_is_refused_with_its_path() {
    let e = refused(&with_driver("{DIST}/driver-trap.wasm").replace("inference:", "infrence: {}\ninference:")).await;
    assert_eq!(e.code().as_str(), "E-MAN-003", "{e}");
    assert!(e.to_string().contains("infrence"), "{e}");
}

#[tokio::test]
async fn a_missing_artifact_source_is_refused_with_e_cap_001() {
    let e = refused(&with_driver("{DIST}/no-such-driver.wasm")).await;
    assert_eq!(e.code().as_str(), "E-CAP-001", "{e}");
    assert!(e.to_string().contains("no-such-driver.wasm"), "{e}");
}

#[tokio::test]
async fn a_file_that_is_not_a_component_is_refused_with_e_cap_002() {
    let dir = tempfile::tempdir().expect("tempdir");
    let text = dir.path().join("driver.wasm");
    std::fs::write(&text, "this is not wasm").expect("write");
    let e = refused(&with_driver(&text.display().to_string())).await;
    assert_eq!(e.code().as_str(), "E-CAP-002", "{e}");
    let core = dir.path().join("core.wasm");
    std::fs::write(&core, [0u8, b'a', b's', b'm', 1, 0, 0, 0]).expect("write");
    let e = refused(&with_driver(&core.display().to_string())).await;
    assert!(e.to_string().contains("core WebAssembly module"), "{e}");
}

#[tokio::test]
async fn a_component_without_the_run_export_is_refused_naming_the_interface() {
    let e = refused(&with_driver("{DIST}/guest-no-run-export.wasm")).await;
    assert_eq!(e.code().as_str(), "E-CAP-003", "{e}");
    assert!(e.to_string().contains("murmur:tool/run@0.1.0"), "{e}");
}

#[tokio::test]
async fn a_component_importing_an_unknown_interface_is_refused_naming_it() {
    let e = refused(&with_driver("{DIST}/guest-imports-unknown.wasm")).await;
    assert_eq!(e.code().as_str(), "E-CAP-004", "{e}");
    assert!(e.to_string().contains("rogue-host"), "{e}");
}

#[tokio::test]
async fn a_primary_driver_whose_credential_resolves_nowhere_refuses_the_launch() {
    let yaml = "name: cred\nartifacts:\n  - {name: d, runtime: driver, source: '{DIST}/driver-anthropic.wasm', gateway: {endpoint: 'https://api.example.com', api_key: '${NOT_SET_ANYWHERE_KEY}'}}\ninference: {model: m, driver: {artifact: d}}\n";
    let e = refused(yaml).await;
    assert_eq!(e.code().as_str(), "E-RUN-025", "{e}");
    assert!(e.to_string().contains("NOT_SET_ANYWHERE_KEY"), "{e}");
}

async fn provider_failure(turn: Turn, expect: &str) {
    let stub = stub(vec![turn]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "hi").await;
    assert_eq!(outcome.exit_status, ExitStatus::Failed);
    assert!(outcome.message.contains(expect), "expected `{expect}` in: {}", outcome.message);
    let result = std::fs::read_to_string(&outcome.result_path).expect("result.txt written");
    assert!(result.starts_with("error: "), "{result}");
    let dir = session.dir.clone();
    session.shutdown().await;
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    assert!(trace.contains("\"exit_status\":\"failed\""));
    assert!(trace.contains("\"event_type\":\"session_end\""));
}

#[tokio::test]
async fn a_provider_500_fails_the_task_with_the_status_and_body() {
    provider_failure(
        Turn::http_error(500, r#"{"type":"error","error":{"type":"api_error","message":"upstream broke"}}"#),
        "HTTP 500",
    )
    .await;
}

#[tokio::test]
async fn a_provider_answering_garbage_fails_the_task_with_a_message() {
    provider_failure(Turn { garbage: Some("data: {not json at all\n\n".into()), ..Default::default() }, "E-RUN-040")
        .await;
}

#[tokio::test]
async fn a_stream_cut_in_the_middle_fails_the_task_and_says_so() {
    provider_failure(
        Turn { text: Some("a long reply that will be cut".into()), cut_after_events: Some(3), ..Default::default() },
        "E-RUN-040",
    )
    .await;
}

#[tokio::test]
async fn a_provider_error_event_mid_stream_fails_the_task_naming_it() {
    let t = Turn {
        text: Some("partial".into()),
        stream_error: Some(capsule_stub::StreamError { kind: "overloaded_error".into(), message: "Overloaded".into() }),
        ..Default::default()
    };
    provider_failure(t, "overloaded_error").await;
}

/// `--endpoint` is held to the manifest's endpoint rules, with the same code, and a refused
/// launch leaves no folder behind.
#[test]
fn an_endpoint_override_is_checked_like_a_manifest_endpoint_and_a_refusal_leaves_no_folder() {
    let root = tempfile::tempdir().expect("tempdir");
    for (endpoint, says) in [
        ("http://10.1.2.3:80", "is plain http to a host that is not loopback"),
        ("10.1.2.3:80", "is not an http(s) URL"),
        ("https://${HOST}/v1", "interpolation is only allowed in api_key"),
    ] {
        let workdir = root.path().join("work").join("hello");
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
            .args(["run", &repo().join("examples/hello").display().to_string(), "--task", "hi", "--keyless"])
            .args(["--endpoint", endpoint, "--workdir"])
            .arg(&workdir)
            .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
            .output()
            .expect("capsule runs");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{endpoint}: refused at launch: {stderr}");
        assert!(stderr.contains("E-MAN-007 at --endpoint") && stderr.contains(says), "{endpoint}: {stderr}");
        assert!(!root.path().join("work").exists(), "{endpoint}: a refused launch made no folder");
    }
}

/// A provider that cannot be reached is named, with what went wrong in words and what to
/// check, instead of a wasi:http error code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_provider_is_named_with_what_went_wrong_and_what_to_check() {
    // The discard port: privileged, so no test of this suite can be listening there (a port
    // that was merely free a moment ago can be taken by a test running beside this one).
    let endpoint = "http://127.0.0.1:9".to_string();
    let session = anthropic_capsule(&endpoint, &[], "").launch().await.expect("launch");
    let outcome = session.submit("hello").await.expect("outcome");
    assert_eq!(outcome.exit_status, ExitStatus::Failed);
    assert!(
        outcome.message.starts_with(&format!("E-RUN-040: cannot reach the provider at {endpoint}"))
            && outcome.message.contains("connection was refused")
            && outcome.message.contains("check the endpoint"),
        "{}",
        outcome.message
    );
    assert!(!outcome.message.contains("ErrorCode"), "{}", outcome.message);
    session.shutdown().await;
}

/// A component declared with a role its imports rule out is refused at launch, naming both.
#[tokio::test]
async fn a_driver_component_declared_as_a_tool_is_refused_by_its_imports() {
    let e = refused(
        "name: bad\nartifacts:\n  - {name: d, runtime: driver, source: '{DIST}/driver-stateful.wasm'}\n  - {name: legacy, runtime: tool, source: '{DIST}/driver-legacy.wasm'}\ninference: {model: m, driver: {artifact: d}}\n",
    )
    .await;
    let text = e.to_string();
    assert_eq!(e.code().as_str(), "E-CAP-007", "{text}");
    assert!(text.contains("artifacts[legacy].runtime") && text.contains("murmur:text/chunks"), "{text}");
}
