//! `capsule host <dir or host.yaml>`: run many capsules in one process, each with its own door,
//! supervised by the host (`capsule_actors::host`), and serve the host API on loopback until
//! SIGTERM or ctrl-c; then stop every capsule gracefully and exit 0.
//!
//! A folder runs every subfolder holding a `murmur.yaml`; a file is a host file
//! (docs/host.md). One sandbox host (engine + component cache) and one machine spend meter are
//! shared by every capsule. Exit codes: 0 after a graceful stop; 2 when the host file, the host
//! config, the engine or the API's listener is refused. A capsule that fails to launch does not
//! stop the host: it is reported (`crashed`, then `failed`) and the others serve.

use capsule_actors::host::{CapsuleEntry, HostHandle, RestartPolicy, Shared, api};
use capsule_protocol::Code;
use capsule_protocol::host_file::{self, HostPlan};
use capsule_runtime::{Host, HostOptions};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli_run::{Stop, chain, default_cache_dir, load_host_config, machine_meter};

/// Options of `capsule host`.
#[derive(clap::Args, Debug, Clone)]
pub struct HostArgs {
    /// A folder of capsule folders (each subfolder holding a murmur.yaml runs), or a host.yaml.
    pub target: PathBuf,
    /// Print the `ready` line as JSON: {"type":"ready","url":…,"capsules":[…]}.
    #[arg(long)]
    pub json: bool,
    /// The host API's port [default: the host file's `port`, else an OS-chosen port].
    #[arg(long)]
    pub port: Option<u16>,
    /// The host config (credentials, spend.machine_tokens_per_day) [default: the host file's
    /// `config`, else $CAPSULE_CONFIG, else ~/.config/capsule-runtime/host.yaml when it exists].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Where to write the host API's token (0600, new at each start, removed at a graceful
    /// stop) [default: capsule-work/host-<pid>.api-token].
    #[arg(long)]
    pub token_file: Option<PathBuf>,
    /// Join a cluster on NATS JetStream: its servers, comma-separated
    /// (`nats://a:4222,nats://b:4222`) [default: the host file's `cluster.servers`].
    #[arg(long)]
    pub cluster: Option<String>,
    /// This host's name in the cluster [default: the host file's `cluster.name`, else
    /// `<machine name>-<pid>`].
    #[arg(long)]
    pub name: Option<String>,
}

/// Connect to the cluster and join it (its journal stream and lease bucket made if missing).
async fn join(plan: &HostPlan, args: &HostArgs) -> Result<Option<capsule_actors::cluster::ClusterHost>, String> {
    use capsule_actors::cluster;
    let entry = plan.cluster.clone().unwrap_or_default();
    let Some(servers) = args.cluster.clone().or((!entry.servers.is_empty()).then_some(entry.servers.clone())) else {
        return Ok(None);
    };
    let urls = cluster::split_urls(&servers);
    let name = args.name.clone().or(entry.name.clone()).unwrap_or_else(cluster::ClusterHost::default_name);
    let ttl = std::time::Duration::from_secs(entry.lease_ttl_secs.unwrap_or(3).max(1));
    let replicas = entry.replicas.unwrap_or(3);
    let joined = cluster::ClusterHost::start(&urls, &name, replicas, ttl).await.map_err(|e| chain(&e))?;
    Ok(Some(joined))
}

/// The plan for a folder (its capsule subfolders) or a host file.
fn plan(target: &Path) -> Result<HostPlan, String> {
    if target.is_dir() {
        let entries = std::fs::read_dir(target).map_err(|e| {
            format!(
                "{code} at {}: cannot list the folder: {e} (fix: pass a readable folder of capsule folders)",
                target.display(),
                code = Code::ManifestMissing
            )
        })?;
        let folders: Vec<String> = entries
            .flatten()
            .filter(|e| e.path().join("murmur.yaml").is_file())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        return host_file::plan_folders(target, &folders).map_err(|d| d.to_string());
    }
    let origin = target.display().to_string();
    let text = std::fs::read_to_string(target).map_err(|e| {
        format!(
            "{code} at {origin}: cannot read the host file: {e} (fix: pass a host.yaml or a folder of capsule folders)",
            code = Code::ManifestMissing
        )
    })?;
    let file = host_file::parse(&text, &origin).map_err(|d| d.to_string())?;
    file.plan(target.parent().unwrap_or(Path::new(".")), &origin).map_err(|d| d.to_string())
}

/// Everything shared by the capsules: the host config, the machine meter, the engine.
async fn shared(plan: &HostPlan, args: &HostArgs) -> Result<Shared, String> {
    let config = args.config.as_ref();
    let cluster = join(plan, args).await?;
    let (config, path) = load_host_config(config.or(plan.config.as_ref()))?;
    // Clustered, `spend.machine_tokens_per_day` is the cluster's, per UTC day.
    let machine = machine_meter(&config, cluster.as_ref().map(|c| c.spend.clone())).await?;
    let tls = match &plan.tls {
        None => None,
        Some((cert, key)) => {
            let files = capsule_actors::tls::TlsFiles { cert: cert.clone(), key: key.clone() };
            Some(capsule_actors::tls::acceptor(&files).map_err(|e| chain(&e))?)
        }
    };
    let host = Host::new(HostOptions { cache_dir: default_cache_dir() }).map_err(|e| chain(&e))?;
    // Each capsule's session runs on a runtime of one worker of its own core's (shards).
    let shards =
        capsule_actors::shards::Shards::per_core().map_err(|e| format!("cannot start the capsules' runtimes: {e}"))?;
    Ok(Shared {
        shards: Some(std::sync::Arc::new(shards)),
        host,
        env: std::env::vars().collect(),
        host_config: path.map(|p| (config, p)),
        machine,
        bind: plan.bind,
        tls,
        cluster,
    })
}

fn print_ready(json: bool, url: &str, token_file: &Path, entries: &[CapsuleEntry]) {
    if json {
        println!("{}", serde_json::json!({"type": "ready", "url": url, "token_file": token_file, "capsules": entries}));
        return;
    }
    eprintln!("host {url} · {} capsules · API token in {}", entries.len(), token_file.display());
    for e in entries {
        let state = serde_json::to_value(e.state).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default();
        let detail = e.url.clone().or_else(|| e.error.clone()).unwrap_or_default();
        eprintln!("  {:<24} {:<8} {detail}", e.name, state);
    }
}

/// Run the host until a stop signal.
pub async fn host(args: HostArgs) -> ExitCode {
    let plan = match plan(&args.target) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let shared = match shared(&plan, &args).await {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    // Listen for the stop signal before anything starts, so a SIGTERM during start-up is a
    // graceful stop too.
    let mut signals = Stop::install();
    let stop = signals.wait();
    tokio::pin!(stop);
    let addr = std::net::SocketAddr::new(plan.bind, args.port.unwrap_or(plan.port));
    let tls = shared.tls.clone();
    let handle = match HostHandle::start(plan.capsules, shared, RestartPolicy::default()).await {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {code}: the host supervisor could not start: {}", chain(&e), code = Code::ActorCrashed);
            return ExitCode::from(2);
        }
    };
    let token_file = args
        .token_file
        .clone()
        .unwrap_or_else(|| PathBuf::from("capsule-work").join(format!("host-{}.api-token", std::process::id())));
    let key = match token_file
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| capsule_actors::control::TokenKey::mint(&token_file))
    {
        Ok(k) => k,
        Err(e) => {
            eprintln!(
                "error: {code}: cannot write the host API token to {}: {e} (fix: pass a writable --token-file)",
                token_file.display(),
                code = Code::SessionIo
            );
            let _ = handle.shutdown().await;
            return ExitCode::from(2);
        }
    };
    // The ready line names it absolutely, so a client in another directory finds it.
    let token_file = std::path::absolute(&token_file).unwrap_or(token_file);
    let api = match api::serve(handle.clone(), addr, key, tls).await {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            let _ = handle.shutdown().await;
            return ExitCode::from(2);
        }
    };
    if let Some(c) = handle.cluster() {
        // The heartbeat names the API from now on.
        let _ = c.api.set(api.url());
    }
    let settled = tokio::select! {
        s = handle.settled() => Some(s),
        _ = &mut stop => None,
    };
    if let Some(entries) = settled {
        print_ready(args.json, &api.url(), &token_file, &entries.unwrap_or_default());
        (&mut stop).await;
    }
    let code = match handle.shutdown().await {
        Ok(entries) => {
            if !args.json {
                eprintln!("host stopped · {} capsules shut down", entries.len());
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(1)
        }
    };
    api.close();
    let _ = std::fs::remove_file(&token_file);
    code
}
