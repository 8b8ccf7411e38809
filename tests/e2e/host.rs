//! The multi-capsule host: `capsule host <dir>` as a process (ready line, host API, doors,
//! restart on request, graceful stop on SIGTERM), and in-process crash isolation: a capsule
//! whose session crash-loops is restarted by the host, with backoff, until the host's intensity
//! limit makes it `failed`, while another capsule keeps answering tasks throughout.

use crate::common::*;
use capsule_actors::Session;
use capsule_actors::host::{Action, CapsuleEntry, CapsuleState, HostHandle, RestartPolicy};
use capsule_protocol::host_file::PlannedCapsule;
use capsule_stub::Turn;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tokio::time::Instant;

/// A keyless Anthropic capsule named `name`, pointed at `endpoint`.
fn manifest(name: &str, endpoint: &str) -> String {
    let dist = repo().join("components/dist");
    format!(
        "name: {name}\nversion: 0.1.0\nartifacts:\n  - name: anthropic\n    runtime: driver\n    source: {}/driver-anthropic.wasm\n    gateway: {{endpoint: '{endpoint}', keyless: true}}\ninference:\n  model: claude-test\n  driver: {{artifact: anthropic}}\n",
        dist.display()
    )
}

fn write_capsule(dir: &Path, name: &str, endpoint: &str) -> PathBuf {
    let folder = dir.join(name);
    std::fs::create_dir_all(&folder).expect("capsule folder");
    std::fs::write(folder.join("murmur.yaml"), manifest(name, endpoint)).expect("manifest");
    folder
}

fn send_body(text: &str) -> Value {
    json!({"jsonrpc": "2.0", "id": 1, "method": "message/send", "params": {"message": {"messageId": "m1", "role": "user", "parts": [{"text": text}]}}})
}

async fn send(url: &str, text: &str) -> Value {
    post_json_body(url, send_body(text).to_string()).await.1
}

/// The trace lines of every session folder under `workdir`.
fn traces(workdir: &Path) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(workdir).expect("workdir").flatten() {
        let t = e.path().join("trace.jsonl");
        if t.is_file() {
            out.push(
                std::fs::read_to_string(t)
                    .expect("trace")
                    .lines()
                    .map(|l| serde_json::from_str(l).expect("json line"))
                    .collect(),
            );
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn capsule_host_serves_every_capsule_folder_restarts_one_on_request_and_stops_gracefully_on_sigterm() {
    let stub_a = stub((0..5).map(|_| Turn::text("from alpha")).collect());
    let slow = Turn { text: Some("never sent".into()), delay_ms: Some(30_000), ..Default::default() };
    let stub_b = stub(vec![Turn::text("from beta"), slow]);
    let root = tempfile::tempdir().expect("tempdir");
    let caps = root.path().join("caps");
    write_capsule(&caps, "alpha", &stub_a.url());
    write_capsule(&caps, "beta", &stub_b.url());
    std::fs::create_dir_all(caps.join("notes")).expect("a folder without murmur.yaml is skipped");

    let mut child = capsule_host(root.path(), &[caps.as_os_str()]).spawn().expect("capsule host starts");
    let mut stderr = child.stderr.take().expect("stderr");
    let stderr = tokio::spawn(async move {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s).await;
        s
    });
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    let line = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
        .await
        .expect("ready within 60 s")
        .expect("stdout")
        .expect("a ready line");
    let ready: Value = serde_json::from_str(&line).expect("ready is JSON");
    assert_eq!(ready["type"], "ready");
    assert_eq!(ready["capsules"].as_array().expect("capsules").len(), 2, "{ready}");
    let api = ready["url"].as_str().expect("url").to_string();
    // The host API's token: in a 0600 file the ready line names (by default under the working
    // directory's capsule-work/), required on every request, reads included.
    let token_file = PathBuf::from(ready["token_file"].as_str().expect("token_file"));
    assert!(token_file.starts_with(root.path().join("capsule-work")), "{}", token_file.display());
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(std::fs::metadata(&token_file).expect("token file").permissions().mode() & 0o777, 0o600);
    }
    let token = std::fs::read_to_string(&token_file).expect("token");
    for (what, bearer) in [("no token", None), ("a wrong token", Some("not-the-token"))] {
        let mut r = reqwest::Client::new().post(format!("{api}/capsules/alpha/stop")).json(&json!({}));
        if let Some(b) = bearer {
            r = r.bearer_auth(b);
        }
        let r = r.send().await.expect("answer");
        assert_eq!(r.status().as_u16(), 401, "{what}");
        assert_eq!(r.headers()["www-authenticate"], "Bearer", "{what}");
        assert_eq!(r.headers()["connection"], "close", "{what}: the unread body ends the connection, and says so");
        let listed = reqwest::get(format!("{api}/capsules")).await.expect("list");
        assert_eq!(listed.status().as_u16(), 401, "a read without the token is refused too");
    }
    let c = authed(&token);

    let list: Vec<Value> = c.get(format!("{api}/capsules")).send().await.expect("list").json().await.expect("json");
    let names: Vec<&str> = list.iter().map(|e| e["name"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["alpha", "beta"]);
    for e in &list {
        assert_eq!(e["state"], "running", "{e}");
        assert_eq!(e["restarts"], 0);
        assert!(e["session_id"].as_str().expect("session").starts_with("ses_"));
        assert!(e["url"].as_str().expect("door").starts_with("http://127.0.0.1:"));
    }
    let (alpha_url, beta_url) = (list[0]["url"].as_str().expect("url"), list[1]["url"].as_str().expect("url"));
    assert_eq!(send(alpha_url, "hi").await["result"]["status"]["response"], "from alpha");
    assert_eq!(send(beta_url, "hi").await["result"]["status"]["response"], "from beta");

    let r = c.post(format!("{api}/capsules/alpha/restart")).json(&json!({})).send().await.expect("restart");
    assert_eq!(r.status().as_u16(), 200);
    let restarted: Value = r.json().await.expect("json");
    assert_eq!(restarted["state"], "running");
    assert_ne!(restarted["session_id"], list[0]["session_id"], "a restart is a new session");
    assert_eq!(
        send(restarted["url"].as_str().expect("url"), "again").await["result"]["status"]["response"],
        "from alpha"
    );

    let r = c.post(format!("{api}/capsules/nope/start")).json(&json!({})).send().await.expect("unknown");
    assert_eq!(r.status().as_u16(), 404);
    let err: Value = r.json().await.expect("json");
    assert!(err["error"].as_str().expect("error").starts_with("unknown_capsule: "), "{err}");
    let r = c.post(format!("{api}/capsules/beta/explode")).json(&json!({})).send().await.expect("unknown action");
    assert_eq!(r.status().as_u16(), 404);

    // What a web page could send is refused, and the capsule is untouched: a form POST from a
    // foreign origin, a plain-text POST, and a rebinding host name.
    let before: Value = c.get(format!("{api}/capsules/beta")).send().await.expect("get").json().await.expect("json");
    let form = c
        .post(format!("{api}/capsules/beta/stop"))
        .header("origin", "https://evil.example")
        .header("content-type", "application/x-www-form-urlencoded")
        .body("x=1")
        .send()
        .await
        .expect("form");
    assert_eq!(form.status().as_u16(), 403);
    let plain = c.post(format!("{api}/capsules/beta/stop")).body("{}").send().await.expect("plain");
    assert_eq!(plain.status().as_u16(), 415);
    let rebound = c
        .post(format!("{api}/capsules/beta/stop"))
        .header("host", "evil.example")
        .json(&json!({}))
        .send()
        .await
        .expect("rebound");
    assert_eq!(rebound.status().as_u16(), 403);
    let after: Value = c.get(format!("{api}/capsules/beta")).send().await.expect("get").json().await.expect("json");
    assert_eq!((&after["state"], &after["session_id"]), (&before["state"], &before["session_id"]), "beta untouched");

    // A task still running at SIGTERM gets its final status (`canceled`), then the host exits 0.
    // Streamed, so the final status is a frame the client reads, not an answer to look up after
    // the session is gone.
    let running = tokio::spawn({
        let url = beta_url.to_string();
        let mut body = send_body("slow");
        body["method"] = json!("message/stream");
        async move {
            reqwest::Client::new()
                .post(url)
                .header("content-type", "application/json")
                .body(body.to_string())
                .send()
                .await
                .expect("stream starts")
                .text()
                .await
        }
    });
    eventually("beta's slow task to reach the provider", || async { stub_b.requests().len() == 2 }).await;
    let pid = child.id().expect("pid").to_string();
    assert!(std::process::Command::new("kill").args(["-TERM", &pid]).status().expect("kill").success());
    let status =
        tokio::time::timeout(Duration::from_secs(60), child.wait()).await.expect("exits within 60 s").expect("wait");
    let err = stderr.await.expect("stderr");
    assert!(status.success(), "graceful exit on SIGTERM: {status:?}\n{err}");
    let sse = running.await.expect("join").expect("the stream ends with the task");
    let last = sse.split("\n\n").filter(|b| b.contains("event: status")).last().unwrap_or_default();
    assert!(
        last.contains("\"state\":\"canceled\"") && last.contains("\"final\":true"),
        "the client read a final canceled status: {sse}"
    );

    let alpha = traces(&root.path().join("capsule-work/alpha"));
    let beta = traces(&root.path().join("capsule-work/beta"));
    assert_eq!((alpha.len(), beta.len()), (2, 1), "alpha ran two sessions, beta one");
    for t in alpha.iter().chain(&beta) {
        assert_eq!(t.last().expect("lines")["event_type"], "session_end", "every session ends with session_end: {t:?}");
    }
    let canceled = beta[0].iter().any(|e| e["event_type"] == "task_end" && e["exit_status"] == "canceled");
    assert!(canceled, "the running task got a final status: {:?}", beta[0]);
    assert!(!token_file.exists(), "a graceful stop removes the API token file");
}

/// A client that sends the host API token on every request.
fn authed(token: &str) -> reqwest::Client {
    let mut h = reqwest::header::HeaderMap::new();
    h.insert(reqwest::header::AUTHORIZATION, format!("Bearer {}", token.trim()).parse().expect("header"));
    reqwest::Client::builder().default_headers(h).build().expect("client")
}

/// Serve the host API in-process with a fresh token; the client sends it.
async fn api_with_token(host: &HostHandle) -> (capsule_actors::host::api::HostApi, reqwest::Client, tempfile::TempDir) {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("api.token");
    let key = capsule_actors::control::TokenKey::mint(&file).expect("mint");
    let api = capsule_actors::host::api::serve(host.clone(), "127.0.0.1:0".parse().expect("addr"), key, None)
        .await
        .expect("api");
    let token = std::fs::read_to_string(&file).expect("token");
    (api, authed(&token), dir)
}

/// Crash `session`'s gateway until its supervisor gives up (more than MAX_RESTARTS in
/// RESTART_PERIOD), injecting each panic only once the previous one was restarted.
async fn crash_loop(session: &Session) {
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut last: Option<(u32, Instant)> = None;
    loop {
        assert!(Instant::now() < deadline, "the session's supervisor did not stop");
        if session.supervisor_cell().get_status() >= ractor::ActorStatus::Stopping {
            return;
        }
        let count = session.restarts().await.get("gateway/anthropic").copied().unwrap_or(0);
        let ready = last.is_none_or(|(c, at)| count > c || at.elapsed() > Duration::from_secs(1));
        if ready && session.inject_gateway_panic("anthropic") {
            last = Some((count, Instant::now()));
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn entry(host: &HostHandle, name: &str) -> CapsuleEntry {
    host.get(name).await.expect("host answers")
}

/// Poll until the capsule's entry satisfies `f` (or 10 s pass).
async fn wait_for(host: &HostHandle, name: &str, what: &str, f: impl Fn(&CapsuleEntry) -> bool) -> CapsuleEntry {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let e = entry(host, name).await;
        if f(&e) {
            return e;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {name}: {what}; last {e:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A host running `a` as alpha and `b` as beta, both running.
async fn start_alpha_and_beta(a: &Capsule, b: &Capsule) -> HostHandle {
    let planned = |name: &str, cap: &Capsule| PlannedCapsule {
        name: name.into(),
        manifest: cap.path().to_path_buf(),
        workdir: cap.workdir.clone(),
        port: 0,
    };
    let shared = loopback_shared();
    let host = HostHandle::start(vec![planned("alpha", a), planned("beta", b)], shared, RestartPolicy::default())
        .await
        .expect("host starts");
    let settled = host.settled().await.expect("settled");
    assert!(settled.iter().all(|e| e.state == CapsuleState::Running), "{settled:?}");
    host
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_looping_capsule_is_restarted_then_failed_while_its_neighbour_keeps_answering() {
    let stub_a = stub((0..10).map(|_| Turn::text("alpha is back")).collect());
    let stub_b = stub((0..5000).map(|_| Turn::text("pong")).collect());
    let (a, b) = (anthropic_capsule(&stub_a.url(), &[], ""), anthropic_capsule(&stub_b.url(), &[], ""));
    let host = start_alpha_and_beta(&a, &b).await;
    let beta = entry(&host, "beta").await;

    // Beta answers tasks through its door for the whole test; every one must complete.
    let stop = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicUsize::new(0));
    let neighbour = tokio::spawn({
        let (stop, answered, url) = (stop.clone(), answered.clone(), beta.url.clone().expect("beta door"));
        async move {
            while !stop.load(Ordering::SeqCst) {
                let v = send(&url, "ping").await;
                assert_eq!(v["result"]["status"]["response"], "pong", "beta failed a task while alpha crashed: {v}");
                answered.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        }
    });

    let policy = RestartPolicy::default();
    let mut session_id = entry(&host, "alpha").await.session_id;
    for round in 1..=policy.max_restarts as u32 {
        let session = host.session("alpha").await.expect("host answers").expect("alpha runs");
        crash_loop(&session).await;
        let e = wait_for(&host, "alpha", "a restart as a new session", |e| {
            e.state == CapsuleState::Running && e.session_id != session_id
        })
        .await;
        assert_eq!(e.restarts, round);
        assert!(e.error.as_deref().unwrap_or("").starts_with("E-RUN-050: crash loop in gateway/anthropic"), "{e:?}");
        session_id = e.session_id;
        let restarted = host.session("alpha").await.expect("host answers").expect("alpha runs");
        let (outcome, _) = run_task(&restarted, "are you back?").await;
        assert_eq!(outcome.message, "alpha is back", "the restarted capsule serves");
    }
    let session = host.session("alpha").await.expect("host answers").expect("alpha runs");
    crash_loop(&session).await;
    let failed = wait_for(&host, "alpha", "failed past the intensity limit", |e| e.state == CapsuleState::Failed).await;
    assert_eq!(failed.restarts, policy.max_restarts as u32, "no restart past the limit");
    assert_eq!(failed.url, None);
    assert!(failed.error.as_deref().unwrap_or("").contains("gave up"), "{failed:?}");
    assert!(host.session("alpha").await.expect("host answers").is_none());

    // An operator starts it again; the neighbour was never touched.
    let started = host.act("alpha", Action::Start).await.expect("start");
    assert_eq!(started.state, CapsuleState::Running);
    stop.store(true, Ordering::SeqCst);
    neighbour.await.expect("beta answered every task");
    assert!(answered.load(Ordering::SeqCst) >= 10, "beta answered only {} tasks", answered.load(Ordering::SeqCst));
    let beta_after = entry(&host, "beta").await;
    assert_eq!(
        (beta_after.state, beta_after.restarts, &beta_after.session_id),
        (CapsuleState::Running, 0, &beta.session_id)
    );

    let end = host.shutdown().await.expect("shutdown");
    assert!(end.iter().all(|e| e.state == CapsuleState::Stopped), "{end:?}");
    assert_eq!(
        host.act("beta", Action::Start).await,
        Err(capsule_actors::host::HostError::Unavailable),
        "a stopped host answers nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_capsule_refused_at_launch_is_failed_at_once_with_its_code_and_the_api_reports_why() {
    let stub = stub(vec![Turn::text("ok")]);
    let good = anthropic_capsule(&stub.url(), &[], "");
    let missing = tempfile::tempdir().expect("tempdir");
    let planned = vec![
        PlannedCapsule {
            name: "good".into(),
            manifest: good.path().to_path_buf(),
            workdir: good.workdir.clone(),
            port: 0,
        },
        PlannedCapsule {
            name: "broken".into(),
            manifest: missing.path().join("nothing-here"),
            workdir: missing.path().join("work"),
            port: 0,
        },
    ];
    let shared = loopback_shared();
    let policy = RestartPolicy { backoff_initial: Duration::from_millis(5), ..RestartPolicy::default() };
    let host = HostHandle::start(planned, shared, policy).await.expect("host starts");
    let (api, c, _token_dir) = api_with_token(&host).await;
    wait_for(&host, "broken", "failed at once", |e| e.state == CapsuleState::Failed).await;
    // A cold component cache can leave `good` compiling well after `broken` gave up: wait on
    // its state, never on time.
    wait_for(&host, "good", "running", |e| e.state == CapsuleState::Running).await;
    let list: Vec<Value> =
        c.get(format!("{}/capsules", api.url())).send().await.expect("list").json().await.expect("json");
    assert_eq!(list[0]["state"], "running");
    assert_eq!(list[1]["state"], "failed");
    assert_eq!(list[1]["restarts"], 0, "a refusal is not retried: {}", list[1]);
    let error = list[1]["error"].as_str().expect("error");
    assert!(error.starts_with("E-MAN-001") && error.contains("refused at launch, so not retried"), "{}", list[1]);
    assert_eq!(list[1]["url"], Value::Null);
    let one: Value =
        c.get(format!("{}/capsules/good", api.url())).send().await.expect("get").json().await.expect("json");
    assert_eq!(one["state"], "running");
    let stopped: Value = c
        .post(format!("{}/capsules/good/stop", api.url()))
        .json(&json!({}))
        .send()
        .await
        .expect("stop")
        .json()
        .await
        .expect("json");
    assert_eq!((stopped["state"].as_str(), &stopped["url"]), (Some("stopped"), &Value::Null));
    let trace = traces(&good.workdir);
    assert_eq!(trace[0].last().expect("lines")["event_type"], "session_end", "a stop is graceful");
    host.shutdown().await.expect("shutdown");
    api.close();
}

fn open_descriptors() -> usize {
    std::fs::read_dir("/proc/self/fd").map(|d| d.count()).unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_capsule_whose_tool_exhausts_its_budgets_never_starves_its_neighbour_or_the_host_api() {
    let stub_a = stub(vec![
        Turn::tool_call("escape", json!({"op": "open_many", "count": 1_000_000})),
        Turn::tool_call("escape", json!({"op": "fill", "path": "big", "bytes": 64 * 1024 * 1024, "chunk": 65536})),
        Turn::tool_call("escape", json!({"op": "fields", "count": 1_000_000, "size": 16_000})),
        Turn::text("alpha done"),
    ]);
    let stub_b = stub((0..5000).map(|_| Turn::text("pong")).collect());
    let a = anthropic_capsule(
        &stub_a.url(),
        &[("escape", "{DIST}/guest-escape.wasm")],
        "capabilities: {limits: {disk_bytes: 1048576}}\n",
    );
    let b = anthropic_capsule(&stub_b.url(), &[], "");
    let host = start_alpha_and_beta(&a, &b).await;
    let (api, c, _token_dir) = api_with_token(&host).await;
    let (alpha, beta) = (entry(&host, "alpha").await, entry(&host, "beta").await);
    let before = open_descriptors();

    let hostile = tokio::spawn({
        let url = alpha.url.clone().expect("alpha door");
        async move { send(&url, "exhaust everything").await }
    });
    let mut answered = 0;
    while !hostile.is_finished() || answered == 0 {
        let v = send(beta.url.as_deref().expect("beta door"), "ping").await;
        assert_eq!(v["result"]["status"]["response"], "pong", "beta failed while alpha's tool ran: {v}");
        let list: Vec<Value> =
            c.get(format!("{}/capsules", api.url())).send().await.expect("host API").json().await.expect("json");
        assert_eq!(list.len(), 2);
        answered += 1;
    }
    let v = hostile.await.expect("alpha's task");
    assert_eq!(v["result"]["status"]["response"], "alpha done", "alpha's task goes on after each coded limit: {v}");
    let trace = traces(&a.workdir).concat();
    let tool_errors: Vec<String> =
        trace.iter().filter(|e| e["event_type"] == "tool_call").map(|e| e.to_string()).collect();
    assert_eq!(tool_errors.len(), 3, "{tool_errors:?}");
    for (err, key) in tool_errors.iter().zip(["resources", "disk_bytes", "resources"]) {
        assert!(err.contains("E-RUN-033") && err.contains(key), "expected E-RUN-033 {key}: {err}");
    }
    let size = std::fs::metadata(a.workdir.join("files/big")).map(|m| m.len()).unwrap_or(0);
    assert!(size <= 1024 * 1024, "the disk budget held: {size} bytes");
    assert!(open_descriptors() <= before + 16, "descriptors released: {before} before, {} after", open_descriptors());
    host.shutdown().await.expect("shutdown");
}
