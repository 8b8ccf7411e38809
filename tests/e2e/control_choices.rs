//! Driver choices beyond switching (CONTRACT §5–§7): alternates at load (a malformed one, one
//! without a credential), a config credential re-read on rotation, `capsule control` from
//! another process, an unauthorized flood that cannot fill the trace, and each choice's own
//! model, cap, config and continuation under one session ceiling.

use crate::common::*;
use crate::control::{SECRET, client, switchy};
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;
use serde_json::{Value, json};

fn alternates_manifest(alternates: &str) -> String {
    format!(
        "name: alts\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: 'http://127.0.0.1:9', keyless: true}}}}\n  - {{name: files, runtime: tool, source: '{{ARTIFACTS}}/files'}}\ninference:\n  model: claude-sonnet-4-5\n  driver: {{artifact: anthropic}}\n  alternates:\n{alternates}"
    )
}

#[tokio::test]
async fn a_malformed_alternate_is_a_load_error_naming_the_entry() {
    let rows = [
        (
            "    - {name: a, model: m1, driver: anthropic}\n    - {name: a, model: m2, driver: anthropic}\n",
            "named twice",
            "alternates[1]",
        ),
        ("    - {name: primary, model: m, driver: anthropic}\n", "`primary` cannot name", "alternates[0]"),
        ("    - {name: b, model: m, driver: nobody}\n", "not declared", "alternates[0]"),
        ("    - {name: c, model: m, driver: files}\n", "is a tool, not a driver", "alternates[0]"),
    ];
    for (alts, rule, at) in rows {
        let e = Capsule::new(&alternates_manifest(alts)).launch().await.err().expect("refused");
        let text = e.to_string();
        assert!(text.contains(rule) && text.contains(at), "expected `{rule}` at `{at}`: {text}");
    }
}

#[tokio::test]
async fn an_alternate_without_a_credential_is_staged_unavailable_and_named_in_a_warning() {
    let yaml = "name: staged\nartifacts:\n  - {name: anthropic, runtime: driver, source: '{DIST}/driver-anthropic.wasm', gateway: {endpoint: 'http://127.0.0.1:9', keyless: true}}\n  - {name: openai, runtime: driver, source: '{DIST}/driver-openai.wasm', gateway: {endpoint: 'https://api.example.com/v1', api_key: '${NOT_SET_OPENAI_KEY}'}}\ninference:\n  model: my-local-model\n  driver: {artifact: anthropic}\n  alternates:\n    - {name: alt, model: gpt-4o, driver: openai}\ncontrol: {settings: [inference.driver]}\n";
    let cap = Capsule::new(yaml);
    let session = cap.launch().await.expect("an alternate's missing credential does not refuse the launch");
    let w3 = session.warnings.iter().find(|w| w.code.as_str() == "W-RUN-003").expect("W-RUN-003");
    assert!(w3.rule.contains("alt") && w3.rule.contains("NOT_SET_OPENAI_KEY"), "{w3}");
    let w9 = session.warnings.iter().find(|w| w.code.as_str() == "W-RUN-009").expect("W-RUN-009 for the unknown model");
    assert!(w9.rule.contains("my-local-model"), "{w9}");
    let r = session
        .set_setting("inference.driver", json!("alt"), capsule_actors::control::Principal::Operator)
        .await
        .expect_err("refused");
    assert_eq!((r.status(), r.reason()), (409, "credential_unresolvable"));
    assert!(r.to_string().contains("NOT_SET_OPENAI_KEY"), "{r}");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_credential_is_re_read_so_rotation_works_without_a_restart() {
    let stub = stub(vec![Turn::text("one"), Turn::text("two")]);
    let cap = Capsule::new(&format!(
        "name: rotate\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{}', api_key: '${{ROTATING_KEY}}'}}}}\ninference: {{model: claude-sonnet-4-5, driver: {{artifact: anthropic}}}}\n",
        stub.url()
    ));
    let config_path = cap.path().join("host.yaml");
    std::fs::write(&config_path, "credentials: {ROTATING_KEY: key-before}\n").expect("config");
    let config =
        capsule_protocol::host_config::parse(&std::fs::read_to_string(&config_path).expect("read"), "host.yaml")
            .expect("parse");
    let mut opts = cap.options(Default::default());
    opts.host_config = Some((config, config_path.clone()));
    let session = capsule_actors::Session::launch(opts).await.expect("launch");
    assert_eq!(run_task(&session, "a").await.0.exit_status, ExitStatus::Ok);
    std::fs::write(&config_path, "credentials: {ROTATING_KEY: key-after}\n").expect("rotate");
    assert_eq!(run_task(&session, "b").await.0.exit_status, ExitStatus::Ok);
    let keys: Vec<String> = stub
        .requests()
        .iter()
        .map(|r| r.headers.iter().find(|(k, _)| k == "x-api-key").map(|(_, v)| v.clone()).unwrap_or_default())
        .collect();
    assert_eq!(keys, vec!["key-before", "key-after"]);
    let dir = session.dir.clone();
    session.shutdown().await;
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    assert!(trace.contains("\"credential_source\":{\"anthropic\":\"config\"}"), "{trace}");
    assert!(!trace.contains("key-before") && !trace.contains("key-after"));
}

#[test]
fn capsule_control_drives_a_running_capsule_from_another_process() {
    use std::io::{BufRead, Write};
    use std::process::{Command, Stdio};
    let cap = switchy("http://127.0.0.1:9", "lifecycle: {after_task: sleep}\n");
    let mut run = Command::new(env!("CARGO_BIN_EXE_capsule"))
        .args(["run"])
        .arg(cap.path())
        .args(["--json", "--workdir"])
        .arg(&cap.workdir)
        .env("PRIMARY_KEY", "k")
        .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("capsule run");
    let mut lines = std::io::BufReader::new(run.stdout.take().expect("stdout")).lines();
    let ready: Value = serde_json::from_str(&lines.next().expect("ready").expect("line")).expect("json");
    let token_file = ready["control_token_file"].as_str().expect("token file").to_string();
    let dir = ready["session_dir"].as_str().expect("session dir").to_string();
    let control = |args: &[&str], stdin: Option<&str>| {
        let mut c = Command::new(env!("CARGO_BIN_EXE_capsule"));
        c.arg("control").args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = c.spawn().expect("capsule control");
        if let Some(s) = stdin {
            child.stdin.take().expect("stdin").write_all(s.as_bytes()).expect("write");
        }
        drop(child.stdin.take());
        let out = child.wait_with_output().expect("output");
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).to_string(),
            String::from_utf8_lossy(&out.stderr).to_string(),
        )
    };
    let (code, out, _) = control(&["show", &dir], None);
    assert_eq!(code, Some(0));
    assert!(out.contains("\"inference.driver\""), "{out}");
    let (code, out, _) = control(&["secret", &dir, "OPENAI_KEY"], Some(SECRET));
    assert_eq!(code, Some(0), "{out}");
    assert!(!out.contains(SECRET));
    let (code, out, _) = control(
        &["set", ready["url"].as_str().expect("url"), "inference.driver", "alt", "--token-file", &token_file],
        None,
    );
    assert_eq!(code, Some(0), "{out}");
    let (code, _, err) = control(&["forget", &dir, "OPENAI_KEY"], None);
    assert_eq!(code, Some(1));
    assert!(err.contains("409") && err.contains("in_use"), "{err}");
    let _ = Command::new("kill").args(["-TERM", &run.id().to_string()]).status();
    let status = run.wait().expect("exits on SIGTERM");
    assert!(status.success(), "graceful exit on SIGTERM: {status:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_unauthorized_requests_with_huge_paths_cannot_fill_the_trace() {
    let stub = stub(vec![]);
    let cap = switchy(&stub.url(), "");
    let (session, c) = client(&cap, &[("PRIMARY_KEY", "k")]).await;
    let trace_path = session.dir.join("trace.jsonl");
    assert_eq!(session.flush_journal().await, Some(0));
    let before = std::fs::metadata(&trace_path).expect("trace").len();
    let long = format!("/control/{}", "a".repeat(20_000));
    for _ in 0..2_000 {
        let (status, _, headers) = c.send("GET", &long, Some("wrong-token"), None, vec![], "127.0.0.1:5000").await;
        assert_eq!(status, 401);
        assert_eq!(headers["www-authenticate"], "Bearer");
    }
    // The journal's mailbox is FIFO: the flush answers after every refusal line was written.
    assert_eq!(session.flush_journal().await, Some(0));
    let grown = std::fs::metadata(&trace_path).expect("trace").len() - before;
    let refused: Vec<Value> = trace(&session).into_iter().filter(|e| e["event_type"] == "control_refused").collect();
    assert!(grown < 64 * 1024, "2,000 refusals of 20 KB paths grew the trace by {grown} bytes");
    assert!(!refused.is_empty() && refused.len() < 2_000, "{} refusals traced", refused.len());
    for e in &refused {
        assert!(e["path"].as_str().expect("path").len() <= 140, "the path is cut: {e}");
        assert_eq!(e["path_bytes"], long.len());
    }
    session.shutdown().await;
}

/// Seed 000's per-choice rules, each observed in what the driver was given: two choices on one
/// driver artifact, each with its own model, output cap (from the model table, read from the
/// request body) and driver config (an alternate's own `driver.config` is honoured; one on the
/// primary's artifact without its own inherits the primary's); a continuation is used only
/// under the choice that returned it; `GET /control` lists drivers by their full name; and
/// without alternates no `driver_choice` key is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_choice_gets_its_own_model_cap_config_and_continuation_even_on_one_driver() {
    let cap = Capsule::new(
        "name: choices\nartifacts:\n  - {name: d, runtime: driver, version: 1.2.0, source: '{DIST}/driver-stateful.wasm'}\n  - {name: e, runtime: driver, source: '{DIST}/driver-stateful.wasm'}\ninference:\n  model: claude-sonnet-4-5\n  driver: {artifact: d, config: {tier: a}}\n  alternates:\n    - {name: same, model: claude-3-5-haiku, driver: d}\n    - {name: own, model: gpt-4o, driver: {artifact: d, config: {tier: b}}}\n    - {name: other, model: gpt-4.1, driver: e}\ncontrol: {settings: [inference.driver]}\n",
    );
    let session = cap.launch().await.expect("launch");
    let ask = |text: &'static str| {
        let session = &session;
        async move { session.submit(text).await.expect("outcome").message }
    };
    let switch = |to: &'static str| {
        let session = &session;
        async move {
            session
                .set_setting("inference.driver", json!(to), capsule_actors::control::Principal::Operator)
                .await
                .expect("switch")
        }
    };
    let tier_a = r#"config={"tier":"a"}"#;
    assert_eq!(
        ask("echo 1").await,
        format!("messages=1 continuation=none model=claude-sonnet-4-5 max_tokens=64000 {tier_a} driver=d@1.2.0")
    );
    assert!(ask("echo 2").await.starts_with("messages=1 continuation=cont-1 "), "the primary holds its continuation");
    switch("same").await;
    assert_eq!(
        ask("echo 3").await,
        format!("messages=5 continuation=none model=claude-3-5-haiku max_tokens=8192 {tier_a} driver=d@1.2.0"),
        "same driver, another choice: the primary's continuation is not used, everything is resent"
    );
    assert!(ask("echo 4").await.starts_with("messages=1 continuation=cont-1 model=claude-3-5-haiku"), "its own one is");
    switch("own").await;
    assert_eq!(
        ask("echo 5").await,
        "messages=9 continuation=none model=gpt-4o max_tokens=16384 config={\"tier\":\"b\"} driver=d@1.2.0"
    );
    switch("other").await;
    assert_eq!(
        ask("echo 6").await,
        "messages=11 continuation=none model=gpt-4.1 max_tokens=32768 config=none driver=e",
        "another artifact gets no config of the primary's"
    );
    let view = session.control_view().await.expect("view");
    let drivers: Vec<&str> = view["settings"][0]["choices"]
        .as_array()
        .expect("choices")
        .iter()
        .filter_map(|c| c["driver"].as_str())
        .collect();
    assert_eq!(drivers, ["d@1.2.0", "d@1.2.0", "d@1.2.0", "e"], "full artifact names: {view}");
    let dir = session.dir.clone();
    session.shutdown().await;
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    let start: Value = serde_json::from_str(trace.lines().next().expect("first line")).expect("json");
    assert_eq!(start["inference_choices"][1]["driver"], "d@1.2.0");

    // Without alternates: no `driver_choice` at all, not even `null`.
    let plain = Capsule::new(
        "name: plain\nartifacts:\n  - {name: d, runtime: driver, source: '{DIST}/driver-stateful.wasm'}\ninference: {model: m, driver: {artifact: d}}\n",
    );
    let session = plain.launch().await.expect("launch");
    session.submit("hello").await.expect("outcome");
    let dir = session.dir.clone();
    session.shutdown().await;
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    assert!(
        trace.contains("\"inference\"") && !trace.contains("driver_choice") && !trace.contains("inference_choices")
    );
}

/// All choices share one session spend meter: what the primary spent counts against a call on
/// another choice. (Were each choice metered alone, the switched call would fit.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_choice_is_charged_to_one_session_ceiling() {
    let cap = Capsule::new(
        "name: metered\nartifacts:\n  - {name: d, runtime: driver, source: '{DIST}/driver-stateful.wasm'}\n  - {name: e, runtime: driver, source: '{DIST}/driver-stateful.wasm'}\ninference:\n  model: m\n  driver: {artifact: d}\n  max_tokens: 1000\n  max_session_tokens: 1700\n  alternates: [{name: other, model: m, driver: e}]\ncontext: {max_tokens: 100000}\ncontrol: {settings: [inference.driver]}\n",
    );
    let session = cap.launch().await.expect("launch");
    // About 500 tokens of input: the first call reserves ~1,500 of 1,700 and settles ~500.
    let long = "word ".repeat(500);
    let first = session.submit(&long).await.expect("outcome");
    assert_eq!(first.exit_status, ExitStatus::Ok, "{}", first.message);
    session
        .set_setting("inference.driver", json!("other"), capsule_actors::control::Principal::Operator)
        .await
        .expect("switch");
    // The other choice resends the history (~500) + 1,000 of output: 500 spent + 1,500 > 1,700.
    let second = session.submit("short").await.expect("outcome");
    assert_eq!(second.exit_status, ExitStatus::SpendCeilingReached, "{}", second.message);
    assert!(second.message.contains("inference.max_session_tokens"), "{}", second.message);
    session.shutdown().await;
}
