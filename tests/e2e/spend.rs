//! The spend meter through the real loop: a refused call is never sent, the task ends
//! `spend_ceiling_reached` everywhere a client looks, the session refusal latches while the
//! session stays up, and sessions sharing the host meter never pass its ceiling.

use crate::common::*;
use capsule_actors::spend::machine::{MachineArgs, MachineMeter};
use capsule_protocol::frame::{Frame, TaskState};
use capsule_protocol::trace::ExitStatus;
use capsule_stub::Turn;
use std::time::Duration;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_past_the_session_ceiling_is_never_sent_and_the_refusal_latches() {
    let stub = stub(vec![Turn::text("never")]);
    let cap = anthropic_capsule(&stub.url(), &[], "  max_session_tokens: 100\n  max_tokens: 1000\n");
    let session = cap.launch().await.expect("launch");
    let (outcome, frames) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::SpendCeilingReached);
    assert!(
        outcome.message.starts_with("E-RUN-080") && outcome.message.contains("inference.max_session_tokens"),
        "{}",
        outcome.message
    );
    assert!(stub.requests().is_empty(), "the refused call was never sent");
    match &frames.last().expect("frames").frame {
        Frame::Status { status, is_final: true, .. } => {
            assert_eq!(status.state, TaskState::Failed);
            assert!(status.message.contains("E-RUN-080"));
        }
        other => panic!("last frame {other:?}"),
    }
    let result = std::fs::read_to_string(&outcome.result_path).expect("result");
    assert!(result.starts_with("error: E-RUN-080"), "{result}");
    let (again, _) = run_task(&session, "and again").await;
    assert_eq!(again.exit_status, ExitStatus::SpendCeilingReached, "the refusal latches");
    let t = trace(&session);
    let ev = t.iter().find(|e| e["event_type"] == "spend_ceiling_reached").expect("traced");
    assert_eq!(ev["limit"], "session");
    assert_eq!(ev["ceiling"], 100);
    assert!(ev["requested"].as_u64().expect("requested") > 1000, "estimate + max output");
    assert!(t.iter().any(|e| e["event_type"] == "task_end" && e["exit_status"] == "spend_ceiling_reached"));
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_within_the_ceiling_is_settled_and_counted() {
    let stub = stub(vec![Turn::text("fits")]);
    let cap = anthropic_capsule(&stub.url(), &[], "  max_session_tokens: 100000\n  max_tokens: 1000\n");
    let session = cap.launch().await.expect("launch");
    let (outcome, _) = run_task(&session, "hello").await;
    assert_eq!(outcome.exit_status, ExitStatus::Ok, "{}", outcome.message);
    let inference = trace(&session).into_iter().find(|e| e["event_type"] == "inference").expect("inference");
    assert!(inference["input_tokens_estimate"].as_u64().expect("estimate") > 0);
    assert_eq!(inference["input_tokens_actual"], 10, "the provider's count is recorded beside the estimate");
    session.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sessions_sharing_the_host_meter_stop_at_its_ceiling() {
    let ledger = tempfile::tempdir().expect("ledger");
    let (meter, _) =
        ractor::Actor::spawn(None, MachineMeter, MachineArgs::new(ledger.path(), Some(1500))).await.expect("meter");
    // The first call reports 900 output tokens: settled ≈ estimate + 900, so the second
    // call's reservation (estimate + 1000) no longer fits under 1500.
    let first = Turn {
        usage: Some(capsule_stub::Usage { input_tokens: Some(10), output_tokens: Some(900), cached_tokens: None }),
        ..Turn::text("first")
    };
    let stub = stub(vec![first, Turn::text("second")]);
    let mut outcomes = Vec::new();
    for _ in 0..2 {
        let cap = anthropic_capsule(&stub.url(), &[], "  max_tokens: 1000\n");
        let mut opts = cap.options(Default::default());
        opts.machine = Some(meter.clone());
        let session = capsule_actors::Session::launch(opts).await.expect("launch");
        let (o, _) = run_task(&session, "hi").await;
        outcomes.push(o);
        session.shutdown().await;
    }
    assert_eq!(outcomes[0].exit_status, ExitStatus::Ok, "{}", outcomes[0].message);
    assert_eq!(outcomes[1].exit_status, ExitStatus::SpendCeilingReached);
    assert!(outcomes[1].message.starts_with("E-RUN-081"), "{}", outcomes[1].message);
    assert_eq!(stub.requests().len(), 1, "the second session's call was never sent");
}

/// The ledger's settlements and reservations: `(settled tokens, open reserved tokens, reserve
/// keys in the order written, settlement count, abandoned count)`.
fn ledger_state(dir: &std::path::Path) -> (u64, u64, Vec<(String, u64)>, usize, usize) {
    let mut settled = 0;
    let mut open: std::collections::HashMap<(String, u64), u64> = Default::default();
    let mut reserves = Vec::new();
    let (mut settlements, mut abandoned) = (0, 0);
    for e in std::fs::read_dir(dir).expect("ledger dir").flatten() {
        if e.path().extension().is_none_or(|x| x != "jsonl") {
            continue;
        }
        for l in std::fs::read_to_string(e.path()).expect("ledger").lines() {
            let v: serde_json::Value = serde_json::from_str(l).expect("a complete ledger line");
            let key = (v["session"].as_str().expect("session").to_string(), v["reservation"].as_u64().expect("id"));
            match v["kind"].as_str() {
                Some("reserve") => {
                    reserves.push(key.clone());
                    open.insert(key, v["tokens"].as_u64().expect("tokens"));
                }
                Some("release") => {
                    open.remove(&key);
                }
                _ => {
                    open.remove(&key);
                    settled += v["tokens"].as_u64().expect("tokens");
                    settlements += 1;
                    abandoned += usize::from(v["abandoned"] == true);
                }
            }
        }
    }
    (settled, open.values().sum(), reserves, settlements, abandoned)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_processes_with_kills_and_resumes_never_settle_past_the_machine_ceiling() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    const CEILING: u64 = 2_000;
    let turn = || Turn {
        delay_ms: Some(1_000),
        usage: Some(capsule_stub::Usage { output_tokens: Some(150), ..Default::default() }),
        ..Turn::text("ok")
    };
    let stub = stub((0..200).map(|_| turn()).collect());
    let cap = anthropic_capsule("https://api.example.com", &[], "");
    let yaml = std::fs::read_to_string(cap.path().join("murmur.yaml")).expect("manifest");
    std::fs::write(
        cap.path().join("murmur.yaml"),
        yaml.replace("driver: {artifact: anthropic}", "driver: {artifact: anthropic}\n  max_tokens: 200"),
    )
    .expect("manifest");
    let ledger = cap.path().join("ledger");
    let config = cap.path().join("host.yaml");
    std::fs::write(
        &config,
        format!("spend: {{machine_tokens_per_day: {CEILING}, ledger_dir: '{}'}}\n", ledger.display()),
    )
    .expect("host config");
    let run = |extra: &[&str], workdir: &std::path::Path| {
        Command::new(env!("CARGO_BIN_EXE_capsule"))
            .arg("run")
            .args(extra)
            .args(["--json", "--keyless", "--endpoint", &stub.url(), "--config"])
            .arg(&config)
            .arg("--workdir")
            .arg(workdir)
            .env("CAPSULE_CACHE_DIR", repo().join("target/test-component-cache"))
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("capsule runs")
    };
    // Compile the driver once into the shared cache, so twenty cold starts do not each compile it.
    capsule_runtime::LoadedArtifact::load_file(&host(), "anthropic", &dist("driver-anthropic")).expect("loads");
    let manifest = cap.path().display().to_string();
    let mut children = Vec::new();
    for i in 0..20 {
        let workdir = cap.path().join(format!("w{i}"));
        children.push((i, run(&["--task", "go", &manifest], &workdir), workdir));
    }
    // Up to five processes found with their call in flight (the reservation is in the ledger,
    // its settlement is not) are killed, then resumed. Which processes the ceiling admits is up
    // to the race, so every process is a candidate.
    let mut resumed = Vec::new();
    let mut killed = 0;
    for (i, child, workdir) in children.iter_mut() {
        if killed >= 5 {
            break;
        }
        let mut lines = std::io::BufReader::new(child.stdout.take().expect("stdout")).lines();
        let ready: serde_json::Value = match lines.next() {
            Some(Ok(l)) => serde_json::from_str(&l).expect("ready line"),
            _ => continue,
        };
        std::thread::spawn(move || for _ in lines.by_ref() {});
        let session = ready["session_id"].as_str().expect("id").to_string();
        let dir = std::path::PathBuf::from(ready["session_dir"].as_str().expect("dir"));
        let deadline = std::time::Instant::now() + Duration::from_secs(120);
        let in_flight = loop {
            let text: String = std::fs::read_dir(&ledger)
                .map(|d| d.flatten().map(|e| std::fs::read_to_string(e.path()).unwrap_or_default()).collect())
                .unwrap_or_default();
            let mine =
                |kind: bool| text.lines().any(|l| l.contains(&session) && l.contains("\"kind\":\"reserve\"") == kind);
            let (reserved, settled) = (mine(true), mine(false));
            if reserved && !settled {
                break true;
            }
            if settled || child.try_wait().expect("wait").is_some() {
                break false;
            }
            assert!(std::time::Instant::now() < deadline, "process {i} neither reserved nor ended");
            tokio::time::sleep(Duration::from_millis(2)).await;
        };
        if in_flight && child.kill().is_ok() {
            killed += 1;

            let _ = child.wait();
            resumed.push(run(&["--resume", &dir.display().to_string()], workdir));
        }
    }
    for (_, child, _) in children.iter_mut() {
        let _ = child.wait().expect("ends");
    }
    for child in resumed.iter_mut() {
        let _ = child.wait().expect("ends");
    }
    let (settled, open, reserves, settlements, abandoned) = ledger_state(&ledger);
    println!(
        "settled {settled} + open {open} of {CEILING}; {settlements} settlements, {abandoned} abandoned, {killed} killed"
    );
    assert!(
        settled + open <= CEILING,
        "the machine ceiling was overshot: {settled} settled + {open} reserved > {CEILING}"
    );
    assert!(killed >= 1, "at least one process was killed with its call in flight");
    assert!(abandoned >= 1 || open > 0, "a killed process's reservation is charged (abandoned) or still counted");
    let unique: std::collections::HashSet<_> = reserves.iter().collect();
    assert_eq!(unique.len(), reserves.len(), "a reservation id was reused within a session");
    assert!(settlements >= 5, "calls were admitted and settled: {settlements}");
}
