//! Commands that look without running: `capsule check` validates a capsule as a launch would
//! (manifest, artifacts compiled and checked, credentials resolved) and starts nothing;
//! `capsule ps` lists the sessions under a folder with their state and the path `--resume`
//! takes.

use capsule_actors::LaunchOptions;
use capsule_runtime::{Host, HostOptions};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli_run::{chain, default_cache_dir, load_host_config};

/// Options of `capsule check`.
#[derive(clap::Args, Debug, Clone)]
pub struct CheckArgs {
    /// The capsule folder, or its murmur.yaml.
    pub capsule: PathBuf,
    /// A host config file (credentials, spend) to resolve credentials with, as `run` would.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Check as `run --endpoint URL` would (the endpoint is held to the manifest's rules).
    #[arg(long)]
    pub endpoint: Option<String>,
    /// With --endpoint: drop the primary driver's credential.
    #[arg(long, requires = "endpoint")]
    pub keyless: bool,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// `capsule check`: exit 0 when the capsule would launch (warnings are printed), 2 with every
/// refusal's code otherwise. Nothing is written: the artifacts' workdir is a temporary folder.
pub async fn check(args: CheckArgs) -> ExitCode {
    let refuse = |message: String, json: bool| {
        if json {
            println!("{}", json!({"ok": false, "error": message}));
        } else {
            eprintln!("error: {message}");
        }
        ExitCode::from(2)
    };
    let host = match Host::new(HostOptions { cache_dir: default_cache_dir() }) {
        Ok(h) => h,
        Err(e) => return refuse(chain(&e), args.json),
    };
    let (config, config_path) = match load_host_config(args.config.as_ref()) {
        Ok(c) => c,
        Err(e) => return refuse(e, args.json),
    };
    let scratch = match tempfile::tempdir() {
        Ok(d) => d,
        Err(e) => return refuse(format!("cannot make a scratch folder: {e}"), args.json),
    };
    let opts = LaunchOptions {
        cluster: None,
        manifest: args.capsule.clone(),
        workdir: scratch.path().join("check"),
        host,
        env: std::env::vars().collect(),
        endpoint_override: args
            .endpoint
            .clone()
            .map(|endpoint| capsule_actors::EndpointOverride { endpoint, keyless: args.keyless }),
        machine: None,
        host_config: config_path.map(|p| (config, p)),
    };
    let prepared = match capsule_actors::launch::prepare(&opts, "ses_check") {
        Ok(p) => p,
        Err(e) => return refuse(chain(&e), args.json),
    };
    // What a launch leaves to the background (a tool, another driver) is compiled here too: a
    // check passes only when every artifact would run.
    for a in &prepared.artifacts {
        if let Err(e) = a.loaded.compiled().await {
            return refuse(chain(&*e), args.json);
        }
    }
    let m = &prepared.manifest;
    let drivers =
        prepared.artifacts.iter().filter(|a| a.decl.runtime == capsule_protocol::manifest::ArtifactRuntime::Driver);
    let tools: Vec<&str> = prepared
        .artifacts
        .iter()
        .filter(|a| a.decl.runtime == capsule_protocol::manifest::ArtifactRuntime::Tool)
        .map(|a| a.decl.name.as_str())
        .collect();
    let warnings: Vec<String> = prepared.warnings.iter().map(ToString::to_string).collect();
    if args.json {
        println!(
            "{}",
            json!({"ok": true, "name": m.name, "version": m.version, "drivers": drivers.map(|a| a.decl.name.clone()).collect::<Vec<_>>(), "tools": tools, "warnings": warnings})
        );
    } else {
        println!(
            "ok: capsule `{}` {} would launch: {} driver(s), tools: {}",
            m.name,
            m.version,
            drivers.count(),
            if tools.is_empty() { "none".to_string() } else { tools.join(", ") }
        );
        for w in &warnings {
            eprintln!("warning: {w}");
        }
    }
    ExitCode::SUCCESS
}

/// Options of `capsule ps`.
#[derive(clap::Args, Debug, Clone)]
pub struct PsArgs {
    /// A capsule's folder (`capsule-work/<capsule>`) or a folder of them (`capsule-work`,
    /// the default).
    #[arg(default_value = "capsule-work")]
    pub folder: PathBuf,
    /// One JSON object per session.
    #[arg(long)]
    pub json: bool,
}

/// One session as `capsule ps` shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct SessionRow {
    /// The session id.
    pub id: String,
    /// The capsule's name.
    pub capsule: String,
    /// When it started (ms since the epoch).
    pub started_ms: u64,
    /// `serving` (its door answers), `ended`, `interrupted` (stopped with a task or queue to
    /// resume) or `stopped` (stopped with nothing to resume).
    pub state: &'static str,
    /// The session folder, for `--resume`.
    pub path: PathBuf,
}

fn session_dirs(folder: &Path) -> Vec<PathBuf> {
    let children = |d: &Path| -> Vec<PathBuf> {
        std::fs::read_dir(d).map(|r| r.flatten().map(|e| e.path()).filter(|p| p.is_dir()).collect()).unwrap_or_default()
    };
    let is_session = |p: &PathBuf| p.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("ses_"));
    let mut out: Vec<PathBuf> = children(folder).into_iter().filter(is_session).collect();
    for capsule in children(folder).into_iter().filter(|p| !is_session(p)) {
        out.extend(children(&capsule).into_iter().filter(is_session));
    }
    out
}

/// Whether something accepts connections at the door address a session recorded.
fn door_answers(dir: &Path) -> bool {
    let Ok(url) = std::fs::read_to_string(dir.join(capsule_actors::session::DOOR_URL_FILE)) else { return false };
    let Some(addr) = url.trim().strip_prefix("http://").and_then(|a| a.parse::<std::net::SocketAddr>().ok()) else {
        return false;
    };
    std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200)).is_ok()
}

/// Read one session folder.
pub fn read_session(dir: &Path) -> Option<SessionRow> {
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).ok()?;
    let events: Vec<Value> = trace.lines().filter_map(|l| serde_json::from_str(l).ok()).collect();
    let start = events.iter().find(|e| e["event_type"] == "session_start")?;
    let (mut running, mut queued) = (None::<String>, Vec::<String>::new());
    for e in &events {
        let id = e["task_id"].as_str().unwrap_or_default().to_string();
        match e["event_type"].as_str().unwrap_or("") {
            "task_queued" => queued.push(id),
            "task_start" => {
                queued.retain(|q| *q != id);
                running = Some(id);
            }
            "task_end" => {
                queued.retain(|q| *q != id);
                if running.as_ref() == Some(&id) {
                    running = None;
                }
            }
            _ => {}
        }
    }
    let ended = events.last().is_some_and(|e| e["event_type"] == "session_end");
    let pending = running.is_some() || !queued.is_empty();
    let state = if door_answers(dir) {
        "serving"
    } else if pending {
        "interrupted"
    } else if ended {
        "ended"
    } else {
        "stopped"
    };
    Some(SessionRow {
        id: dir.file_name()?.to_str()?.to_string(),
        capsule: start["capsule"].as_str().unwrap_or("?").to_string(),
        started_ms: start["timestamp"].as_u64().unwrap_or(0),
        state,
        path: dir.to_path_buf(),
    })
}

/// `capsule ps`.
pub fn ps(args: PsArgs) -> ExitCode {
    if !args.folder.is_dir() {
        eprintln!(
            "error: {} is not a folder; pass a capsule's work folder (capsule-work/<capsule>) or capsule-work",
            args.folder.display()
        );
        return ExitCode::from(2);
    }
    let mut rows: Vec<SessionRow> = session_dirs(&args.folder).iter().filter_map(|d| read_session(d)).collect();
    rows.sort_by_key(|r| r.started_ms);
    for r in &rows {
        if args.json {
            println!(
                "{}",
                json!({"session_id": r.id, "capsule": r.capsule, "started_ms": r.started_ms, "state": r.state, "path": r.path})
            );
        } else {
            let hint = if r.state == "interrupted" { "   ← capsule run --resume <path>" } else { "" };
            println!("{:<12} {:<20} {:<36} {}{hint}", r.state, r.capsule, r.id, r.path.display());
        }
    }
    if rows.is_empty() && !args.json {
        eprintln!("no sessions under {}", args.folder.display());
    }
    ExitCode::SUCCESS
}
