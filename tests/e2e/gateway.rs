//! The gateway: the host attaches the credential on egress, the guest never holds it, and the
//! key appears nowhere the session writes.

use crate::common::*;
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;

const KEY: &str = "sk-test-KEY-0123456789-never-leaks";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_gateway_attaches_the_key_and_it_appears_nowhere_else() {
    let stub = stub(vec![Turn::text("keyed reply")]);
    let yaml = format!(
        "name: keyed\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{}', api_key: '${{TEST_PROVIDER_KEY}}'}}}}\ninference: {{model: m, driver: {{artifact: anthropic}}}}\n",
        stub.url()
    );
    let cap = Capsule::new(&yaml);
    let session = cap.launch_with_env(&[("TEST_PROVIDER_KEY", KEY)]).await.expect("launch");
    let (outcome, frames) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    let req = &stub.requests()[0];
    let header = |n: &str| req.headers.iter().find(|(k, _)| k == n).map(|(_, v)| v.clone());
    assert_eq!(header("x-api-key").as_deref(), Some(KEY), "the host attached the credential");
    assert_eq!(header("authorization"), None);
    assert_eq!(req.path, "/v1/messages");
    // The guest's environment never holds the key.
    let prepared = capsule_actors::launch::prepare(
        &cap.options([("TEST_PROVIDER_KEY".to_string(), KEY.to_string())].into()),
        "ses_x",
    )
    .expect("prepare");
    for a in &prepared.artifacts {
        assert!(
            a.grants.env.iter().all(|(k, v)| !v.contains(KEY) && k != "TEST_PROVIDER_KEY"),
            "key in {}'s env",
            a.decl.name
        );
        let endpoint = a.grants.env.iter().find(|(k, _)| k == "MURMUR_INFERENCE_ENDPOINT").map(|(_, v)| v.clone());
        assert_eq!(endpoint.as_deref(), Some("http://127.0.0.1:1"), "the driver sees only the unbound gateway address");
    }
    let dir = session.dir.clone();
    session.shutdown().await;
    for f in ["trace.jsonl", "conversation.jsonl", "out/result.txt"] {
        let text = std::fs::read_to_string(dir.join(f)).expect("file");
        assert!(!text.contains(KEY), "key leaked into {f}");
    }
    for f in frames {
        assert!(!f.to_sse().contains(KEY), "key leaked into a frame");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_guest_set_auth_header_is_replaced_not_forwarded() {
    // The policy unit tests cover header stripping; here the real driver sets none and the stub
    // sees exactly one credential header for a keyless gateway: none at all.
    let stub = stub(vec![Turn::text("ok")]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok);
    let req = &stub.requests()[0];
    assert!(
        req.headers.iter().all(|(k, _)| k != "x-api-key" && k != "authorization"),
        "keyless sends no credential: {:?}",
        req.headers
    );
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_older_driver_that_sets_its_own_auth_header_gets_the_real_credential_instead() {
    let stub = stub(vec![Turn::text("legacy ok")]);
    let yaml = format!(
        "name: legacy\nartifacts:\n  - {{name: old, runtime: driver, source: '{{DIST}}/driver-legacy.wasm', gateway: {{endpoint: '{}', api_key: '${{TEST_PROVIDER_KEY}}'}}}}\ninference: {{model: m, driver: {{artifact: old}}}}\n",
        stub.url()
    );
    let cap = Capsule::new(&yaml);
    let session = cap.launch_with_env(&[("TEST_PROVIDER_KEY", KEY)]).await.expect("launch");
    let (outcome, _) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    assert_eq!(outcome.message, "legacy ok");
    let req = &stub.requests()[0];
    let values: Vec<&str> =
        req.headers.iter().filter(|(k, _)| k == "x-api-key" || k == "authorization").map(|(_, v)| v.as_str()).collect();
    assert_eq!(values, vec![KEY], "the guest's own headers were stripped and only the real key attached");
    // `old` names no known kind and declares no upstream_auth: the launch says how its key goes.
    assert!(
        session.warnings.iter().any(|w| w.code.as_str() == "W-CAP-002" && w.at == "artifacts[old]"),
        "{:?}",
        session.warnings
    );
    session.shutdown().await;
}

/// A driver of a known kind sends its key only in its own style: an Anthropic driver's request
/// to an OpenAI-style path carries no key (the style is the driver's, not the request's).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_driver_kind_gets_no_warning_and_its_key_in_its_own_header() {
    let stub = stub(vec![Turn::text("ok")]);
    let yaml = format!(
        "name: known\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{}', api_key: '${{TEST_PROVIDER_KEY}}'}}}}\ninference: {{model: m, driver: {{artifact: anthropic}}}}\n",
        stub.url()
    );
    let cap = Capsule::new(&yaml);
    let session = cap.launch_with_env(&[("TEST_PROVIDER_KEY", KEY)]).await.expect("launch");
    assert!(!session.warnings.iter().any(|w| w.code.as_str() == "W-CAP-002"), "{:?}", session.warnings);
    let (outcome, _) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    let req = &stub.requests()[0];
    assert!(req.headers.iter().any(|(k, v)| k == "x-api-key" && v == KEY), "{:?}", req.headers);
    assert!(!req.headers.iter().any(|(k, _)| k == "authorization"));
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_appears_in_no_log_line_even_at_trace_level() {
    let stub = stub(vec![Turn::http_error(401, "{\"error\":\"bad key\"}")]);
    let yaml = format!(
        "name: logged\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{}', api_key: '${{TEST_PROVIDER_KEY}}'}}}}\ninference: {{model: m, driver: {{artifact: anthropic}}}}\n",
        stub.url()
    );
    let cap = Capsule::new(&yaml);
    let out = tokio::process::Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["run"])
        .arg(cap.path())
        .args(["--task", "x", "--json", "--workdir"])
        .arg(&cap.workdir)
        .env("TEST_PROVIDER_KEY", KEY)
        .env("CAPSULE_LOG", "trace")
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .output()
        .await
        .expect("runs");
    assert_eq!(out.status.code(), Some(1), "the provider refused the key: the task fails");
    assert_eq!(stub.requests()[0].headers.iter().find(|(k, _)| k == "x-api-key").map(|(_, v)| v.as_str()), Some(KEY));
    let all = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(all.len() > 1000, "trace-level logging produced output");
    assert!(!all.contains(KEY), "the key leaked into the output or a log line");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_response_past_its_cap_is_cut_and_the_task_fails_with_the_limit_named() {
    // Half a megabyte of reply text against a 16 KiB cap on one response.
    let script = capsule_stub::Script {
        chunk_chars: 4096,
        ..capsule_stub::Script::new(vec![Turn::text("x".repeat(512 * 1024))])
    };
    let stub = capsule_stub::Stub::start(script).expect("stub");
    let cap = anthropic_capsule(&stub.url(), &[], "capabilities: {limits: {response_bytes: 16384}}\n");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "talk forever").await;
    assert_eq!(outcome.exit_status, ExitStatus::Failed);
    assert!(outcome.message.contains("E-RUN-033") && outcome.message.contains("response_bytes"), "{}", outcome.message);
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_connections_are_reused_across_calls_and_sessions_each_call_with_its_own_key() {
    let stub = stub((0..6).map(|i| Turn::text(format!("reply {i}"))).collect());
    let capsule = |var: &str| {
        Capsule::new(&format!(
            "name: pooled\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{}', api_key: '${{{var}}}'}}}}\ninference: {{model: m, driver: {{artifact: anthropic}}}}\n",
            stub.url()
        ))
    };
    let (a, b) = (capsule("KEY_A"), capsule("KEY_B"));
    let a = a.launch_with_env(&[("KEY_A", "sk-session-a")]).await.expect("launch a");
    let b = b.launch_with_env(&[("KEY_B", "sk-session-b")]).await.expect("launch b");
    let mut keys = Vec::new();
    for (session, key) in [(&a, "sk-session-a"), (&b, "sk-session-b")] {
        for task in 0..3 {
            let (outcome, _) = run_task(session, &format!("task {task}")).await;
            assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
            keys.push(key);
        }
    }
    let requests = stub.requests();
    assert_eq!(requests.len(), 6);
    for (req, key) in requests.iter().zip(&keys) {
        let sent = req.headers.iter().find(|(k, _)| k == "x-api-key").map(|(_, v)| v.as_str());
        assert_eq!(sent, Some(*key), "every call carries its own session's key, pooled connection or not");
        assert_ne!(req.client_port, 0, "the stub saw the client's port");
    }
    let ports: std::collections::BTreeSet<u16> = requests.iter().map(|r| r.client_port).collect();
    assert!(ports.len() < requests.len(), "calls made one after another reuse a connection: {ports:?}");
    a.shutdown().await;
    b.shutdown().await;
}
