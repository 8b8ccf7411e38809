//! `capsule run`: launch a session, stream its frames to the terminal, run one task, exit 0
//! only when the task ended `ok`.
//!
//! Exit codes: 0 ok; 1 the task ended otherwise (failed, max turns...); 2 the capsule was
//! refused at launch (bad manifest, bad artifact, missing credential).

use capsule_actors::door::DoorOptions;
use capsule_actors::spend::machine::{MachineArgs, MachineMeter, MachineMsg};
use capsule_actors::{EndpointOverride, LaunchOptions, Session, TaskOutcome};
use capsule_protocol::Code;
use capsule_protocol::host_config::HostConfig;
use capsule_protocol::trace::ExitStatus;
use capsule_runtime::{Host, HostOptions};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::printer::{self, Style};
use crate::summary::summary;
use capsule_protocol::frame::TaskState;
use capsule_protocol::manifest::AfterTask;
use std::sync::Arc;

/// Options of `capsule run`.
#[derive(clap::Args, Debug, Clone)]
pub struct RunArgs {
    /// The capsule folder, or its murmur.yaml (optional with --resume: the session names it).
    pub capsule: Option<PathBuf>,
    /// Continue the session in this folder (`<workdir>/<session id>`) after the process
    /// stopped: finished tool calls are not run again, the in-flight provider call is re-issued,
    /// frame ids continue.
    #[arg(long, conflicts_with = "task")]
    pub resume: Option<PathBuf>,
    /// With --resume: when a journal file is damaged in the middle (E-RUN-063), keep its valid
    /// prefix, drop the rest and say what was dropped, instead of refusing.
    #[arg(long, requires = "resume")]
    pub repair: bool,
    /// The task text; without it the capsule serves its door and waits for tasks.
    #[arg(long)]
    pub task: Option<String>,
    /// Print a `ready` line, then one JSON object per frame.
    #[arg(long)]
    pub json: bool,
    /// Workdir for session folders and the tools' scope [default: ./capsule-work/<capsule name>].
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// Where precompiled components are kept [default: $CAPSULE_CACHE_DIR, else ~/.cache/capsule-runtime].
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Send the primary driver's traffic to this endpoint instead of the manifest's.
    #[arg(long)]
    pub endpoint: Option<String>,
    /// With --endpoint: the upstream needs no key (else the manifest's credential is kept).
    #[arg(long, requires = "endpoint")]
    pub keyless: bool,
    /// The door's port on the bind address [default: the manifest's `network.internal_port`,
    /// else an OS-chosen port].
    #[arg(long)]
    pub port: Option<u16>,
    /// The door's bind address. Beyond loopback the door needs TLS (--tls-cert, --tls-key)
    /// and the manifest's `network.authentication: bearer`.
    #[arg(long, default_value = "127.0.0.1")]
    pub bind: std::net::IpAddr,
    /// The door's TLS certificate chain (PEM); serves https.
    #[arg(long, requires = "tls_key")]
    pub tls_cert: Option<PathBuf>,
    /// The door's TLS private key (PEM).
    #[arg(long, requires = "tls_cert")]
    pub tls_key: Option<PathBuf>,
    /// The host config (credentials, spend.machine_tokens_per_day) [default: $CAPSULE_CONFIG,
    /// else ~/.config/capsule-runtime/host.yaml when it exists].
    #[arg(long)]
    pub config: Option<PathBuf>,
}

/// The host config file to read, if any.
fn config_path(explicit: Option<&PathBuf>) -> Option<PathBuf> {
    if let Some(p) = explicit {
        return Some(p.clone());
    }
    if let Some(p) = std::env::var_os("CAPSULE_CONFIG") {
        return Some(PathBuf::from(p));
    }
    let home = std::env::var_os("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".config")))?;
    Some(home.join("capsule-runtime/host.yaml")).filter(|p| p.exists())
}

/// Read the host config; a missing default file is an empty config, a named one must exist.
pub fn load_host_config(explicit: Option<&PathBuf>) -> Result<(HostConfig, Option<PathBuf>), String> {
    let Some(path) = config_path(explicit) else { return Ok((HostConfig::default(), None)) };
    let text = std::fs::read_to_string(&path).map_err(|e| {
        format!(
            "{code} at {}: cannot read the host config: {e} (fix: pass an existing file to --config)",
            path.display(),
            code = Code::ManifestMissing
        )
    })?;
    let config = capsule_protocol::host_config::parse(&text, &path.display().to_string()).map_err(|d| d.to_string())?;
    Ok((config, Some(path)))
}

fn default_ledger_dir() -> PathBuf {
    let base = std::env::var_os("XDG_STATE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".local/state")))
        .unwrap_or_else(|| PathBuf::from("."));
    base.join("capsule-runtime/spend")
}

/// Start the host-wide spend meter when the host config sets a machine ceiling.
pub async fn machine_meter(
    config: &HostConfig,
    cluster: Option<capsule_actors::cluster::ClusterSpend>,
) -> Result<Option<ractor::ActorRef<MachineMsg>>, String> {
    let Some(ceiling) = config.spend.machine_tokens_per_day else { return Ok(None) };
    let dir = config.spend.ledger_dir.as_ref().map(PathBuf::from).unwrap_or_else(default_ledger_dir);
    let args = MachineArgs { cluster, ..MachineArgs::new(dir.clone(), Some(ceiling)) };
    let (meter, _) = ractor::Actor::spawn(None, MachineMeter, args).await.map_err(|e| {
        format!(
            "{code}: the host spend meter could not start with ledger {}: {e}",
            dir.display(),
            code = Code::ActorCrashed
        )
    })?;
    Ok(Some(meter))
}

/// The first `session_start` of a session folder's trace.
fn recorded_start(dir: &std::path::Path) -> Option<serde_json::Value> {
    let trace = std::fs::read_to_string(dir.join("trace.jsonl")).ok()?;
    trace
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .find(|e| e["event_type"] == "session_start")
}

fn recorded_manifest(dir: &std::path::Path) -> Option<PathBuf> {
    recorded_start(dir).and_then(|e| e["manifest"].as_str().map(PathBuf::from))
}

/// The `--endpoint` (and `--keyless`) the session was started with, so a resume without them
/// sends the primary driver's traffic where the session did.
fn recorded_endpoint(dir: &std::path::Path) -> Option<EndpointOverride> {
    let o = recorded_start(dir)?.get("endpoint_override").cloned()?;
    Some(EndpointOverride { endpoint: o["endpoint"].as_str()?.to_string(), keyless: o["keyless"].as_bool()? })
}

/// The full cause chain of an error, one cause per `: `.
pub fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    s
}

pub fn default_cache_dir() -> Option<PathBuf> {
    if let Some(d) = std::env::var_os("CAPSULE_CACHE_DIR") {
        return Some(PathBuf::from(d));
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("capsule-runtime"))
}

fn capsule_name(path: &std::path::Path) -> String {
    let dir =
        if path.is_dir() { path.to_path_buf() } else { path.parent().map(|p| p.to_path_buf()).unwrap_or_default() };
    let dir = std::fs::canonicalize(&dir).unwrap_or(dir);
    dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "capsule".into())
}

/// A door beyond loopback needs TLS: without it the bind is refused before a session starts.
/// (Its other need, the door token, is checked when the door opens: the manifest says.)
pub fn loopback_bind(bind: std::net::IpAddr, tls: bool) -> Result<(), String> {
    if bind.is_loopback() || tls {
        return Ok(());
    }
    Err(format!(
        "{code} at --bind: `{bind}` is not a loopback address, and a door there needs TLS and its token: otherwise anyone who can reach {bind} could submit tasks, read every frame and cancel work (fix: use 127.0.0.1 or ::1, or pass --tls-cert and --tls-key and set `network: {{authentication: bearer}}` in the manifest)",
        code = Code::DoorBind
    ))
}

/// The door's TLS acceptor, when --tls-cert and --tls-key are given.
fn door_tls(args: &RunArgs) -> Result<Option<capsule_actors::tls::TlsAcceptor>, String> {
    let (Some(cert), Some(key)) = (&args.tls_cert, &args.tls_key) else { return Ok(None) };
    let files = capsule_actors::tls::TlsFiles { cert: cert.clone(), key: key.clone() };
    capsule_actors::tls::acceptor(&files).map(Some).map_err(|e| chain(&e))
}

/// Run one task; the process exit code follows the task's exit status.
pub async fn run(args: RunArgs) -> ExitCode {
    if let Err(message) = loopback_bind(args.bind, args.tls_cert.is_some()) {
        eprintln!("error: {message}");
        return ExitCode::from(2);
    }
    let host = match Host::new(HostOptions { cache_dir: args.cache_dir.clone().or_else(default_cache_dir) }) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    let over = args.endpoint.as_ref().map(|e| EndpointOverride { endpoint: e.clone(), keyless: args.keyless });
    run_with(host, args, over, std::env::vars().collect()).await
}

type HostSetup = (Option<(HostConfig, PathBuf)>, Option<ractor::ActorRef<MachineMsg>>);

async fn host_setup(args: &RunArgs) -> Result<HostSetup, String> {
    let (config, path) = load_host_config(args.config.as_ref())?;
    let machine = machine_meter(&config, None).await?;
    Ok((path.map(|p| (config, p)), machine))
}

/// SIGTERM and SIGINT, listened for from the moment this is made: a signal that arrives
/// before anyone waits is kept, never left to the default action (which would kill the
/// process without its graceful stop).
pub(crate) struct Stop {
    #[cfg(unix)]
    term: Option<tokio::signal::unix::Signal>,
    #[cfg(unix)]
    int: Option<tokio::signal::unix::Signal>,
}

impl Stop {
    /// Start listening.
    pub(crate) fn install() -> Stop {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{SignalKind, signal};
            Stop { term: signal(SignalKind::terminate()).ok(), int: signal(SignalKind::interrupt()).ok() }
        }
        #[cfg(not(unix))]
        Stop {}
    }

    /// Wait for the first stop signal (possibly one that already arrived).
    pub(crate) async fn wait(&mut self) {
        #[cfg(unix)]
        {
            async fn recv(s: &mut Option<tokio::signal::unix::Signal>) {
                match s {
                    Some(s) => {
                        s.recv().await;
                    }
                    None => std::future::pending().await,
                }
            }
            tokio::select! {
                () = recv(&mut self.term) => {}
                () = recv(&mut self.int) => {}
            }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Launch, serve the door, run the launch task (if any) or wait for door tasks, then exit as
/// `lifecycle.after_task` says.
pub async fn run_with(
    host: Host,
    args: RunArgs,
    endpoint_override: Option<EndpointOverride>,
    env: std::collections::HashMap<String, String>,
) -> ExitCode {
    let mut stop = Stop::install();
    let tls = match door_tls(&args) {
        Ok(t) => t,
        Err(message) => {
            eprintln!("error: {message}");
            return ExitCode::from(2);
        }
    };
    let capsule = match (&args.capsule, &args.resume) {
        (Some(c), _) => c.clone(),
        (None, Some(dir)) if recorded_start(dir).is_none() => {
            eprintln!("error: {}", capsule_actors::LaunchError::NotASession { path: dir.clone() });
            return ExitCode::from(2);
        }
        (None, Some(dir)) => match recorded_manifest(dir) {
            Some(m) => m,
            None => {
                eprintln!(
                    "error: {code} at {}: the session's trace names no manifest (fix: pass the capsule folder before --resume)",
                    dir.display(),
                    code = Code::SessionIo
                );
                return ExitCode::from(2);
            }
        },
        (None, None) => {
            eprintln!("error: name the capsule folder (or murmur.yaml) to run, or --resume a session folder");
            return ExitCode::from(2);
        }
    };
    let workdir = args.workdir.clone().unwrap_or_else(|| PathBuf::from("capsule-work").join(capsule_name(&capsule)));
    let (host_config, machine) = match host_setup(&args).await {
        Ok(x) => x,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let endpoint_override = match (&endpoint_override, &args.resume) {
        (None, Some(dir)) => recorded_endpoint(dir),
        _ => endpoint_override,
    };
    let opts = LaunchOptions {
        cluster: None,
        manifest: capsule.clone(),
        workdir: workdir.clone(),
        host,
        env,
        endpoint_override,
        machine,
        host_config,
    };
    let launched = match &args.resume {
        Some(dir) => Session::resume_with(opts, dir, args.repair).await.map(|(s, reports)| {
            for r in reports {
                eprintln!("warning: journal: {r}");
            }
            s
        }),
        None => Session::launch(opts).await,
    };
    let session = match launched {
        Ok(s) => Arc::new(s),
        Err(e @ capsule_actors::LaunchError::AlreadyEnded { .. }) => {
            eprintln!("{e}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    let port = args.port.or(session.manifest.network.internal_port).unwrap_or(0);
    let addr = std::net::SocketAddr::new(args.bind, port);
    let door = match capsule_actors::door::serve_with(session.clone(), addr, DoorOptions { tls }).await {
        Ok(d) => d,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            session.shutdown().await;
            return ExitCode::from(2);
        }
    };
    if let Err(e) = session.record_door(&door.url()) {
        eprintln!("warning: cannot record the door's address: {e}");
    }
    let style = if args.json { Style::Json } else { Style::Human };
    if args.json {
        println!(
            "{}",
            serde_json::json!({"type": "ready", "session_id": session.session_id, "workdir": session.workdir, "files": session.files, "session_dir": session.dir, "url": door.url(), "control_token_file": session.control.as_ref().and_then(|c| c.token_file.clone()), "door_token_file": session.door_auth.as_ref().and_then(|d| d.token_file.clone())})
        );
    } else {
        eprintln!("session {} · workdir {} · door {}", session.session_id, session.workdir.display(), door.url());
        if let Some(file) = session.door_auth.as_ref().and_then(|d| d.token_file.as_ref()) {
            eprintln!("the door requires `Authorization: Bearer <token>`; the token is in {} (0600)", file.display());
        }
    }
    for w in &session.warnings {
        eprintln!("warning: {w}");
    }
    let mut finals = printer::start(&session, style).await;
    let after = session.manifest.lifecycle.after_task();
    let mut code = ExitCode::SUCCESS;
    let launch_tasks: Vec<Result<TaskOutcome, _>> = if args.resume.is_some() {
        match session.resume_task().await {
            Ok(outcomes) if outcomes.is_empty() => {
                eprintln!(
                    "session {}: no task was running or queued when it stopped; nothing to resume{}",
                    session.session_id,
                    if after == AfterTask::Sleep { " (serving the door)" } else { "" }
                );
                Vec::new()
            }
            Ok(outcomes) => outcomes.into_iter().map(Ok).collect(),
            Err(e) => vec![Err(e)],
        }
    } else if let Some(task) = &args.task {
        vec![session.submit(task).await]
    } else {
        Vec::new()
    };
    let had_task = !launch_tasks.is_empty();
    if !had_task && args.resume.is_none() && !args.json {
        eprintln!(
            "waiting for tasks on the door {url}: send one with\n  curl -s {url} -H 'content-type: application/json' -d '{{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"message/send\",\"params\":{{\"message\":{{\"role\":\"user\",\"parts\":[{{\"text\":\"…\"}}]}}}}}}'\nand follow it with `capsule watch {url}`; Ctrl-C stops",
            url = door.url()
        );
    }
    for outcome in launch_tasks {
        match outcome {
            Ok(o) => {
                while let Some((id, _)) = finals.recv().await {
                    if id == o.task_id {
                        break;
                    }
                }
                if !args.json {
                    eprintln!("{}", summary(&session.dir, &o));
                }
                if o.exit_status != ExitStatus::Ok {
                    code = ExitCode::from(1);
                }
            }
            Err(e) => {
                eprintln!("error: {}", chain(&e));
                code = ExitCode::from(1);
            }
        }
    }
    let keep_serving = (!had_task && args.resume.is_none()) || after == AfterTask::Sleep;
    if keep_serving {
        if after == AfterTask::Exit && !had_task {
            tokio::select! {
                _ = stop.wait() => {}
                _ = async { while let Some((_, state)) = finals.recv().await { if state != TaskState::Rejected { break; } } } => {}
            }
        } else {
            stop.wait().await;
        }
    }
    let result_path = session.dir.join("out").join("result.txt");
    eprintln!("session {} · result {}", session.session_id, result_path.display());
    session.shutdown().await;
    door.close();
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_door_binds_beyond_loopback_only_with_tls() {
        assert!(loopback_bind("127.0.0.1".parse().expect("ip"), false).is_ok());
        assert!(loopback_bind("::1".parse().expect("ip"), false).is_ok());
        for ip in ["0.0.0.0", "::", "192.0.2.1"] {
            let e = loopback_bind(ip.parse().expect("ip"), false).expect_err("refused");
            assert!(e.starts_with("E-RUN-061"), "{e}");
            assert!(loopback_bind(ip.parse().expect("ip"), true).is_ok(), "{ip} with TLS");
        }
    }
}
