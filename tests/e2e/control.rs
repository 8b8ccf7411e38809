//! The control surface and driver choices (CONTRACT §5–§7, seed 000): the refusal order, one
//! row per refusal; switching mid-task between an Anthropic primary and an OpenAI alternate
//! with the provider bodies inspected; `in_use` and `credential_unresolvable`; the agent's
//! `switch-driver` tool.

use crate::common::*;
use axum::body::Body;
use axum::extract::ConnectInfo;
use capsule_actors::door;
use capsule_protocol::trace::ExitStatus;
use capsule_stub::{Thinking, ToolCall, Turn};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use std::net::SocketAddr;
use std::sync::Arc;
use tower::ServiceExt;

pub(crate) const SECRET: &str = "sk-openai-injected-SECRET-value";

pub(crate) fn switchy(stub_url: &str, extra: &str) -> Capsule {
    Capsule::new(&format!(
        "name: switchy\nartifacts:\n  - {{name: anthropic, runtime: driver, source: '{{DIST}}/driver-anthropic.wasm', gateway: {{endpoint: '{stub_url}', api_key: '${{PRIMARY_KEY}}'}}}}\n  - {{name: openai, runtime: driver, source: '{{DIST}}/driver-openai.wasm', gateway: {{endpoint: '{stub_url}/v1', api_key: '${{OPENAI_KEY}}'}}}}\n  - {{name: spin, runtime: tool, source: '{{DIST}}/guest-spin-forever.wasm'}}\ncapabilities: {{limits: {{deadline_seconds: 1}}}}\ninference:\n  model: claude-sonnet-4-5\n  driver: {{artifact: anthropic}}\n  max_tokens: 1000\n  alternates:\n    - {{name: alt, model: gpt-4o, driver: openai}}\ncontrol:\n  settings: [inference.driver, inference.max_tokens]\n  secrets: [OPENAI_KEY]\n{extra}"
    ))
}

pub(crate) struct Client {
    app: axum::Router,
    token: String,
}

impl Client {
    pub(crate) async fn send(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        ct: Option<&str>,
        body: Vec<u8>,
        peer: &str,
    ) -> (u16, Value, axum::http::HeaderMap) {
        let mut b = axum::http::Request::builder().method(method).uri(path);
        if let Some(t) = token {
            b = b.header("authorization", format!("Bearer {t}"));
        }
        if let Some(ct) = ct {
            b = b.header("content-type", ct);
        }
        let mut req = b.body(Body::from(body)).expect("request");
        req.extensions_mut().insert(ConnectInfo(peer.parse::<SocketAddr>().expect("peer")));
        let resp = self.app.clone().oneshot(req).await.expect("answer");
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let bytes = resp.into_body().collect().await.expect("body").to_bytes();
        (status, serde_json::from_slice(&bytes).unwrap_or(Value::Null), headers)
    }

    pub(crate) async fn ok(&self, method: &str, path: &str, ct: Option<&str>, body: &str) -> (u16, Value) {
        let (s, v, _) =
            self.send(method, path, Some(&self.token.clone()), ct, body.as_bytes().to_vec(), "127.0.0.1:5000").await;
        (s, v)
    }
}

pub(crate) async fn client(cap: &Capsule, env: &[(&str, &str)]) -> (Arc<capsule_actors::Session>, Client) {
    client_for(Arc::new(cap.launch_with_env(env).await.expect("launch")))
}

/// A control client of `session` (its token read from the file the launch minted).
pub(crate) fn client_for(session: Arc<capsule_actors::Session>) -> (Arc<capsule_actors::Session>, Client) {
    let token =
        std::fs::read_to_string(session.control.as_ref().expect("surface").token_file.as_ref().expect("minted here"))
            .expect("token file");
    let app = door::app(session.clone());
    (session, Client { app, token })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_refusal_has_its_status_and_reason_in_the_contract_order() {
    let stub = stub(vec![]);
    let cap = switchy(&stub.url(), "");
    let (session, c) = client(&cap, &[("PRIMARY_KEY", "k1")]).await;
    let tok = c.token.clone();
    let big_setting = format!("{{\"value\": \"{}\"}}", "x".repeat(1100));
    let big_secret = "s".repeat(9000);
    // (method, path, token, content type, body, peer, status, reason)
    type Row<'a> = (&'a str, &'a str, Option<&'a str>, Option<&'a str>, String, &'a str, u16, &'a str);
    let rows: Vec<Row> = vec![
        ("GET", "/control", None, None, String::new(), "127.0.0.1:1", 401, "unauthorized"),
        ("GET", "/control/nope", Some("wrong"), None, String::new(), "127.0.0.1:1", 401, "unauthorized"),
        ("GET", "/control/nope/deeper", Some(&tok), None, String::new(), "127.0.0.1:1", 404, "unknown_path"),
        (
            "PUT",
            "/control/settings/other.setting",
            Some(&tok),
            Some("application/json"),
            "{}".into(),
            "127.0.0.1:1",
            404,
            "undeclared_setting",
        ),
        ("PUT", "/control/secrets/NOT_DECLARED", Some(&tok), None, "v".into(), "10.1.2.3:1", 404, "undeclared_secret"),
        ("POST", "/control", Some(&tok), None, String::new(), "127.0.0.1:1", 405, "method_not_allowed"),
        (
            "GET",
            "/control/settings/inference.driver",
            Some(&tok),
            None,
            String::new(),
            "127.0.0.1:1",
            405,
            "method_not_allowed",
        ),
        ("PUT", "/control/secrets/OPENAI_KEY", Some(&tok), None, big_secret.clone(), "10.1.2.3:1", 403, "not_loopback"),
        ("PUT", "/control/secrets/OPENAI_KEY", Some(&tok), None, big_secret, "127.0.0.1:1", 413, "too_large"),
        (
            "PUT",
            "/control/settings/inference.driver",
            Some(&tok),
            Some("text/plain"),
            big_setting,
            "127.0.0.1:1",
            413,
            "too_large",
        ),
        (
            "PUT",
            "/control/settings/inference.driver",
            Some(&tok),
            Some("text/plain"),
            "{\"value\":\"alt\"}".into(),
            "127.0.0.1:1",
            415,
            "unsupported_media_type",
        ),
        (
            "PUT",
            "/control/settings/inference.driver",
            Some(&tok),
            Some("application/json"),
            String::new(),
            "127.0.0.1:1",
            422,
            "missing_body",
        ),
        (
            "PUT",
            "/control/settings/inference.driver",
            Some(&tok),
            Some("application/json"),
            "{\"v\":1}".into(),
            "127.0.0.1:1",
            422,
            "missing_body",
        ),
        (
            "PUT",
            "/control/settings/inference.driver",
            Some(&tok),
            Some("application/json"),
            "{\"value\":5}".into(),
            "127.0.0.1:1",
            422,
            "invalid_value",
        ),
        (
            "PUT",
            "/control/settings/inference.max_tokens",
            Some(&tok),
            Some("application/json"),
            "{\"value\":0}".into(),
            "127.0.0.1:1",
            422,
            "invalid_value",
        ),
        (
            "PUT",
            "/control/secrets/OPENAI_KEY",
            Some(&tok),
            None,
            "bad\u{7f}value".into(),
            "127.0.0.1:1",
            422,
            "invalid_value",
        ),
        (
            "PUT",
            "/control/settings/inference.driver",
            Some(&tok),
            Some("application/json"),
            "{\"value\":\"nope\"}".into(),
            "127.0.0.1:1",
            422,
            "undeclared_driver",
        ),
        (
            "PUT",
            "/control/settings/inference.driver",
            Some(&tok),
            Some("application/json"),
            "{\"value\":\"alt\"}".into(),
            "127.0.0.1:1",
            409,
            "credential_unresolvable",
        ),
    ];
    for (i, (method, path, token, ct, body, peer, status, reason)) in rows.into_iter().enumerate() {
        let (s, v, headers) = c.send(method, path, token, ct, body.into_bytes(), peer).await;
        let error = v["error"].as_str().unwrap_or("");
        assert_eq!((s, error.split(':').next().unwrap_or("")), (status, reason), "row {i}: {method} {path}: {v}");
        assert_eq!(v.as_object().map(|o| o.len()), Some(1), "row {i}: the body is {{\"error\"}} only: {v}");
        if status == 401 {
            assert_eq!(headers["www-authenticate"], "Bearer");
        }
        assert_eq!(headers["connection"], "close", "row {i}: a refusal ends the connection, and says so");
        if status == 405 {
            assert!(headers.contains_key("allow"), "row {i}: 405 names what is allowed");
        }
    }
    // 409 in_use: inject, switch to the choice it keys, then try to forget it.
    assert_eq!(
        c.ok("PUT", "/control/secrets/OPENAI_KEY", Some("text/plain"), SECRET).await,
        (200, json!({"name": "OPENAI_KEY", "set": true, "replaced": false}))
    );
    let (s, v) =
        c.ok("PUT", "/control/settings/inference.driver", Some("application/json"), "{\"value\":\"alt\"}").await;
    assert_eq!(
        (s, &v["previous"], &v["value"], &v["applies_from"]),
        (200, &json!("primary"), &json!("alt"), &json!("next_inference_call"))
    );
    let (s, v) = c.ok("DELETE", "/control/secrets/OPENAI_KEY", None, "").await;
    assert_eq!((s, v["error"].as_str().unwrap_or("").split(':').next().unwrap_or("")), (409, "in_use"));
    let (s, view) = c.ok("GET", "/control", None, "").await;
    assert_eq!(s, 200);
    assert!(!view.to_string().contains(SECRET), "no secret value in any answer");
    assert_eq!(view["secrets"], json!([{"name": "OPENAI_KEY", "set": true}]));
    let driver = view["settings"]
        .as_array()
        .expect("settings")
        .iter()
        .find(|x| x["name"] == "inference.driver")
        .expect("driver")
        .clone();
    assert_eq!(driver["value"], "alt");
    assert_eq!(driver["choices"][1], json!({"name": "alt", "driver": "openai", "model": "gpt-4o", "available": true}));
    // Switch back, then the secret can be forgotten.
    assert_eq!(
        c.ok("PUT", "/control/settings/inference.driver", Some("application/json"), "{\"value\":\"primary\"}").await.0,
        200
    );
    assert_eq!(
        c.ok("DELETE", "/control/secrets/OPENAI_KEY", None, "").await,
        (200, json!({"name": "OPENAI_KEY", "set": false}))
    );
    let dir = session.dir.clone();
    session.shutdown().await;
    let listing: Vec<_> =
        std::fs::read_dir(&dir).map(|d| d.filter_map(|e| e.ok()).map(|e| e.file_name()).collect()).unwrap_or_default();
    let trace = std::fs::read_to_string(dir.join("trace.jsonl"))
        .unwrap_or_else(|e| panic!("trace in {}: {e}; listing {listing:?}", dir.display()));
    assert!(!trace.contains(SECRET) && !trace.contains(&tok), "neither secret nor token in the trace");
    assert!(trace.contains("\"control_refused\"") && trace.contains("\"control_change\""));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_declared_control_every_control_path_is_404_and_no_token_is_minted() {
    let stub = stub(vec![]);
    let cap = anthropic_capsule(&stub.url(), &[], "");
    let session = Arc::new(cap.launch().await.expect("launch"));
    assert!(session.control.is_none());
    assert!(!session.dir.join("control.token").exists());
    let app = door::app(session.clone());
    for path in ["/control", "/control/settings/inference.driver"] {
        let resp = app
            .clone()
            .oneshot(axum::http::Request::builder().uri(path).body(Body::empty()).expect("req"))
            .await
            .expect("answer");
        assert_eq!(resp.status().as_u16(), 404, "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_mid_task_switch_carries_the_history_but_not_provider_bound_state() {
    let t1 = Turn {
        thinking: Some(Thinking { text: "primary reasoning".into(), signature: "sig-primary".into() }),
        text: Some("spinning".into()),
        tool_calls: Some(vec![ToolCall { id: Some("toolu_one".into()), name: "spin".into(), input: json!({}) }]),
        ..Default::default()
    };
    let t2 = Turn {
        tool_calls: Some(vec![ToolCall { id: Some("call_two".into()), name: "spin".into(), input: json!({}) }]),
        ..Default::default()
    };
    let stub = stub(vec![t1, t2, Turn::text("back on primary")]);
    let cap = switchy(&stub.url(), "");
    let (session, c) = client(&cap, &[("PRIMARY_KEY", "k-primary")]).await;
    assert_eq!(c.ok("PUT", "/control/secrets/OPENAI_KEY", Some("text/plain"), SECRET).await.0, 200);
    let task = tokio::spawn({
        let s = session.clone();
        async move { s.submit("do it").await.expect("outcome") }
    });
    eventually("turn 1 sent", || async { stub.requests().len() == 1 }).await;
    assert_eq!(
        c.ok("PUT", "/control/settings/inference.driver", Some("application/json"), "{\"value\":\"alt\"}").await.0,
        200
    );
    eventually("turn 2 sent", || async { stub.requests().len() == 2 }).await;
    assert_eq!(
        c.ok("PUT", "/control/settings/inference.driver", Some("application/json"), "{\"value\":\"primary\"}").await.0,
        200
    );
    let outcome = task.await.expect("join");
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    assert_eq!(outcome.message, "back on primary");
    let reqs = stub.requests();
    assert_eq!(reqs[0].path, "/v1/messages");
    assert_eq!(reqs[1].path, "/v1/chat/completions", "turn 2 went to the alternate");
    assert_eq!(
        reqs[2].path,
        "/v1/messages",
        "turn 3 back on the primary: {:?} {}",
        reqs.iter().map(|r| r.path.clone()).collect::<Vec<_>>(),
        std::fs::read_to_string(session.dir.join("trace.jsonl")).unwrap_or_default()
    );
    let alt = reqs[1].body.to_string();
    assert!(
        !alt.contains("primary reasoning") && !alt.contains("sig-primary"),
        "the alternate received no thinking block"
    );
    assert!(!alt.contains("continuation"), "no continuation id");
    assert_eq!(reqs[1].body["model"], "gpt-4o");
    let msgs = reqs[1].body["messages"].as_array().expect("messages");
    assert!(msgs.iter().any(|m| m["tool_calls"][0]["id"] == "toolu_one"), "the same tool call id: {alt}");
    assert!(
        msgs.iter().any(|m| m["role"] == "tool"
            && m["tool_call_id"] == "toolu_one"
            && m["content"].as_str().unwrap_or("").contains("E-RUN-030")),
        "the same tool result: {alt}"
    );
    let auth = |i: usize| {
        reqs[i].headers.iter().find(|(k, _)| k == "authorization" || k == "x-api-key").map(|(_, v)| v.clone())
    };
    assert_eq!(auth(0).as_deref(), Some("k-primary"));
    assert_eq!(
        auth(1).as_deref(),
        Some(format!("Bearer {SECRET}").as_str()),
        "the switch changed which credential is attached"
    );
    let back = &reqs[2].body;
    let first_assistant = back["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .find(|m| m["role"] == "assistant")
        .expect("assistant")
        .clone();
    assert_eq!(
        first_assistant["content"][0],
        json!({"type": "thinking", "thinking": "primary reasoning", "signature": "sig-primary"}),
        "thinking is sent again after the switch back"
    );
    let dir = session.dir.clone();
    session.shutdown().await;
    let record: Vec<Value> = std::fs::read_to_string(dir.join("conversation.jsonl"))
        .expect("record")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let producers: Vec<Value> =
        record.iter().filter(|m| m["role"] == "assistant").map(|m| m["produced_by"].clone()).collect();
    assert_eq!(
        producers,
        vec![
            json!({"driver": "anthropic", "model": "claude-sonnet-4-5"}),
            json!({"driver": "openai", "model": "gpt-4o"}),
            json!({"driver": "anthropic", "model": "claude-sonnet-4-5"})
        ]
    );
    assert!(record[1].to_string().contains("primary reasoning"), "the stored history is never edited");
    let trace: Vec<Value> = std::fs::read_to_string(dir.join("trace.jsonl"))
        .expect("trace")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json"))
        .collect();
    let choices: Vec<&str> = trace
        .iter()
        .filter(|e| e["event_type"] == "inference")
        .map(|e| e["driver_choice"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(choices, vec!["primary", "alt", "primary"]);
    let start = &trace[0];
    assert_eq!(start["inference_choices"][1]["credential_source"], "injected");
    // `available` means what GET /control means by it: a switch would be accepted now. At
    // launch no secret is injected yet, so the alternate is not.
    assert_eq!(start["inference_choices"][0]["available"], true);
    assert_eq!(start["inference_choices"][1]["available"], false, "{start}");
    assert!(trace.iter().any(|e| e["event_type"] == "control_applied"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_agent_switch_driver_tool_switches_and_refusals_come_back_as_tool_errors() {
    let stub = stub(vec![
        Turn::tool_call("switch-driver", json!({"driver": "alt"})),
        Turn::tool_call("switch-driver", json!({"driver": "nope"})),
        Turn::text("done"),
    ]);
    let cap = switchy(&stub.url(), "  agent_settings: [inference.driver]\n");
    let (session, c) = client(&cap, &[("PRIMARY_KEY", "k")]).await;
    assert_eq!(c.ok("PUT", "/control/secrets/OPENAI_KEY", Some("text/plain"), SECRET).await.0, 200);
    let (outcome, _) = run_task(&session, "switch yourself").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    let reqs = stub.requests();
    assert!(reqs[0].body["tools"].to_string().contains("switch-driver"), "the tool is offered");
    assert_eq!(reqs[1].path, "/v1/chat/completions", "the agent's switch applied to the next call");
    let last_tool = reqs[2].body["messages"]
        .as_array()
        .expect("messages")
        .iter()
        .rev()
        .find(|m| m["role"] == "tool")
        .expect("tool")
        .clone();
    assert!(last_tool["content"].as_str().unwrap_or("").contains("undeclared_driver"), "{last_tool}");
    let dir = session.dir.clone();
    session.shutdown().await;
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).expect("trace");
    assert!(trace.contains("\"principal\":\"agent\""));
}

/// A tiny deterministic generator (xorshift64*), so the property tests replay exactly.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

async fn op(c: &Client, kind: u64) -> (&'static str, u16) {
    match kind % 4 {
        0 => (
            "switch_alt",
            c.ok("PUT", "/control/settings/inference.driver", Some("application/json"), "{\"value\":\"alt\"}").await.0,
        ),
        1 => (
            "switch_primary",
            c.ok("PUT", "/control/settings/inference.driver", Some("application/json"), "{\"value\":\"primary\"}")
                .await
                .0,
        ),
        2 => ("inject", c.ok("PUT", "/control/secrets/OPENAI_KEY", Some("text/plain"), SECRET).await.0),
        _ => ("forget", c.ok("DELETE", "/control/secrets/OPENAI_KEY", None, "").await.0),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_switch_inject_forget_answers_match_a_model_of_the_state() {
    let stub = stub(vec![]);
    let cap = switchy(&stub.url(), "");
    let (session, c) = client(&cap, &[("PRIMARY_KEY", "k")]).await;
    let (mut on_alt, mut set) = (false, false);
    let mut rng = Rng(0x5eed_1234_abcd_0001);
    for i in 0..2000 {
        let (what, status) = op(&c, rng.next()).await;
        let expected = match what {
            "switch_alt" if set => {
                on_alt = true;
                200
            }
            "switch_alt" => 409,
            "switch_primary" => {
                on_alt = false;
                200
            }
            "inject" => {
                set = true;
                200
            }
            _ if on_alt && set => 409,
            _ => {
                set = false;
                200
            }
        };
        assert_eq!(status, expected, "op {i} ({what}) with on_alt={on_alt} set={set}");
    }
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_switch_inject_forget_never_leave_the_active_choice_without_a_key() {
    let stub = stub(vec![]);
    let cap = switchy(&stub.url(), "");
    let (session, c) = client(&cap, &[("PRIMARY_KEY", "k")]).await;
    let c = Arc::new(c);
    let mut clients = Vec::new();
    for seed in 1..=8u64 {
        let c = c.clone();
        clients.push(tokio::spawn(async move {
            let mut rng = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
            let mut seen = Vec::new();
            for _ in 0..300 {
                let (what, status) = op(&c, rng.next()).await;
                assert!(
                    matches!(
                        (what, status),
                        ("switch_alt", 200 | 409) | ("switch_primary", 200) | ("inject", 200) | ("forget", 200 | 409)
                    ),
                    "{what} answered {status}"
                );
                let (_, view) = c.ok("GET", "/control", None, "").await;
                let active = view["settings"][0]["value"].as_str().unwrap_or("").to_string();
                let key_set = view["secrets"][0]["set"] == true;
                assert!(active != "alt" || key_set, "the active choice `alt` lost its key: {view}");
                seen.push(status);
            }
            seen
        }));
    }
    let mut answers = 0;
    for h in clients {
        answers += h.await.expect("client").len();
    }
    assert_eq!(answers, 2400);
    session.shutdown().await;
}

/// The choice in use, the injected secrets and a controller's cap each have one owner, which
/// keeps them across its restart: a Credentials crash mid-session changes nothing a client can
/// see, and every control operation still answers as before the crash.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_credentials_crash_keeps_the_choice_the_secrets_and_the_cap_and_every_control_operation_still_answers() {
    let stub = stub(vec![Turn::text("on the alternate"), Turn::text("on the primary")]);
    let cap = switchy(&stub.url(), "");
    let (session, c) = client(&cap, &[("PRIMARY_KEY", "k-primary")]).await;
    let put = |setting: &'static str, value: &'static str| {
        let c = &c;
        async move {
            c.ok(
                "PUT",
                &format!("/control/settings/{setting}"),
                Some("application/json"),
                &format!("{{\"value\":{value}}}"),
            )
            .await
        }
    };
    assert_eq!(c.ok("PUT", "/control/secrets/OPENAI_KEY", Some("text/plain"), SECRET).await.0, 200);
    assert_eq!(put("inference.driver", "\"alt\"").await.0, 200);
    assert_eq!(put("inference.max_tokens", "77").await.0, 200);

    assert!(session.inject_credentials_panic(), "the credentials actor is running");
    let trace = session.dir.join("trace.jsonl");
    eventually("credentials restarted", || async {
        std::fs::read_to_string(&trace).unwrap_or_default().contains("\"actor\":\"credentials\"")
    })
    .await;

    // Every operation, in an order where each answer depends on what survived the crash.
    let (s, view) = c.ok("GET", "/control", None, "").await;
    assert_eq!(s, 200);
    assert_eq!(view["settings"][0]["value"], "alt", "the choice in use survived: {view}");
    assert_eq!(view["settings"][1]["value"], 77, "the cap survived: {view}");
    assert_eq!(view["secrets"], json!([{"name": "OPENAI_KEY", "set": true}]), "the secret survived");
    assert_eq!(view["settings"][0]["choices"][1]["available"], true);
    let (s, v) = c.ok("DELETE", "/control/secrets/OPENAI_KEY", None, "").await;
    assert_eq!((s, v["error"].as_str().unwrap_or("").split(':').next()), (409, Some("in_use")), "{v}");
    let outcome = session.submit("first").await.expect("outcome");
    assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, "on the alternate"));
    let first = &stub.requests()[0];
    assert_eq!(first.path, "/v1/chat/completions", "the call went to the alternate");
    let auth = first.headers.iter().find(|(k, _)| k == "authorization").map(|(_, v)| v.as_str());
    assert_eq!(auth, Some(format!("Bearer {SECRET}").as_str()), "with the secret injected before the crash");
    assert_eq!(first.body["max_tokens"], 77, "under the cap set before the crash");
    assert_eq!(
        c.ok("PUT", "/control/secrets/OPENAI_KEY", Some("text/plain"), SECRET).await,
        (200, json!({"name": "OPENAI_KEY", "set": true, "replaced": true}))
    );
    let (s, v) = put("inference.driver", "\"primary\"").await;
    assert_eq!((s, &v["previous"], &v["value"]), (200, &json!("alt"), &json!("primary")));
    assert_eq!(
        c.ok("DELETE", "/control/secrets/OPENAI_KEY", None, "").await,
        (200, json!({"name": "OPENAI_KEY", "set": false}))
    );
    let (s, v) = put("inference.driver", "\"alt\"").await;
    assert_eq!((s, v["error"].as_str().unwrap_or("").split(':').next()), (409, Some("credential_unresolvable")));
    let (s, v) = put("inference.max_tokens", "55").await;
    assert_eq!((s, &v["previous"], &v["value"]), (200, &json!(77), &json!(55)));
    let outcome = session.submit("second").await.expect("outcome");
    assert_eq!((outcome.exit_status, outcome.message.as_str()), (ExitStatus::Ok, "on the primary"));
    let second = &stub.requests()[1];
    assert_eq!((second.path.as_str(), &second.body["max_tokens"]), ("/v1/messages", &json!(55)));
    session.shutdown().await;
}
