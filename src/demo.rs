//! `capsule demo [--provider anthropic|openai]`: start the provider stub on a free loopback
//! port and run `examples/hello` (or `examples/openai`) against it, offline, with no key. The
//! stub answers from the example's `stub-script.yaml`; the capsule's real driver and file tool
//! components run for real, and the gateway attaches a placeholder key (never a real one: the
//! demo replaces the provider's key variable in its own environment snapshot).

use capsule_actors::EndpointOverride;
use capsule_runtime::{Host, HostOptions};
use capsule_stub::{Script, Stub};
use std::path::PathBuf;
use std::process::ExitCode;

use crate::cli_run::{RunArgs, chain, run_with};

/// Options of `capsule demo`.
#[derive(clap::Args, Debug, Clone)]
pub struct DemoArgs {
    /// The task.
    #[arg(long, default_value = "Write a short greeting to hello.txt, then read it back.")]
    pub task: String,
    /// JSON frames, as `capsule run --json`.
    #[arg(long)]
    pub json: bool,
    /// Workdir [default: ./capsule-work/<example>].
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// Where precompiled components are kept.
    #[arg(long)]
    pub cache_dir: Option<PathBuf>,
    /// Which provider wire format the stub and the driver speak: `anthropic` (examples/hello)
    /// or `openai` (examples/openai).
    #[arg(long, default_value = "anthropic")]
    pub provider: String,
}

fn examples_dir() -> PathBuf {
    let here = PathBuf::from("examples");
    if here.join("hello").is_dir() { here } else { PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples") }
}

/// Run the demo.
pub async fn demo(args: DemoArgs) -> ExitCode {
    let (example, key_var) = match args.provider.as_str() {
        "anthropic" => ("hello", "ANTHROPIC_API_KEY"),
        "openai" => ("openai", "OPENAI_API_KEY"),
        other => {
            eprintln!("error: unknown provider `{other}`; use --provider anthropic or --provider openai");
            return ExitCode::from(2);
        }
    };
    let dir = examples_dir().join(example);
    let script = match Script::load(&dir.join("stub-script.yaml")) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    let stub = match Stub::start(script) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    eprintln!("provider stub on {} (offline; no key needed)", stub.url());
    let cache_dir = args.cache_dir.clone().or_else(crate::cli_run::default_cache_dir);
    let host = match Host::new(HostOptions { cache_dir }) {
        Ok(h) => h,
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            return ExitCode::from(2);
        }
    };
    let mut env: std::collections::HashMap<String, String> = std::env::vars().collect();
    env.insert(key_var.into(), "stub-key-not-a-secret".into());
    let run = RunArgs {
        capsule: Some(dir),
        resume: None,
        repair: false,
        task: Some(args.task),
        json: args.json,
        workdir: args.workdir,
        cache_dir: None,
        endpoint: None,
        keyless: false,
        port: None,
        bind: std::net::Ipv4Addr::LOCALHOST.into(),
        config: None,
        tls_cert: None,
        tls_key: None,
    };
    let code = run_with(host, run, Some(EndpointOverride { endpoint: stub.url(), keyless: false }), env).await;
    stub.shutdown();
    code
}
