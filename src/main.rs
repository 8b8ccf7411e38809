//! `capsule`: run Murmur capsules. See `capsule --help` and the README.

mod call_inputs;
mod cli_run;
mod control_cli;
mod demo;
mod host_cli;
mod inspect;
mod install;
mod printer;
mod sse_client;
mod summary;
mod watch;

use capsule_actors::workers::Workers;
use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

/// Runs AI agents packaged as Murmur capsules, in isolation.
#[derive(Parser, Debug)]
#[command(name = "capsule", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run a capsule (a folder with murmur.yaml, or the file) on one task.
    Run(cli_run::RunArgs),
    /// Run examples/hello offline against the built-in provider stub.
    Demo(demo::DemoArgs),
    /// Run every capsule of a folder or host.yaml in one process, each with its own door,
    /// supervised, and serve the host API until SIGTERM.
    Host(host_cli::HostArgs),
    /// Follow a running capsule's frames through its door, reconnecting after a drop.
    Watch(watch::WatchArgs),
    /// Show or change a running capsule's settings and secrets (its control surface).
    Control(control_cli::ControlArgs),
    /// Check a capsule as a launch would (manifest, artifacts, credentials) without running it.
    Check(inspect::CheckArgs),
    /// List the sessions under a folder, with their state and the path `run --resume` takes.
    Ps(inspect::PsArgs),
    /// Install a Murmur artifact package (.mur.zip or artifact folder) into a capsule project.
    Install(install::InstallArgs),
    /// Print a shell completion script: `capsule completions bash > ~/.local/share/bash-completion/completions/capsule`.
    Completions {
        /// The shell.
        shell: clap_complete::Shell,
    },
    /// Serve the scripted provider stub (Anthropic Messages and OpenAI Chat Completions).
    StubProvider {
        /// The script (YAML or JSON).
        #[arg(long)]
        script: PathBuf,
        /// Port on 127.0.0.1 (an OS-chosen port when absent).
        #[arg(long)]
        port: Option<u16>,
    },
}

/// The log filter without `CAPSULE_LOG`: warnings of this project's crates, errors of the rest.
const DEFAULT_LOG: &str = "error,capsule=warn,capsule_actors=warn,capsule_runtime=warn,capsule_protocol=warn";

fn main() -> ExitCode {
    let cli = Cli::parse();
    // Our own crates' warnings by default; other crates' logs (wasmtime's, hyper's) only when
    // asked for with CAPSULE_LOG (an EnvFilter: `debug`, `capsule_actors=trace`, ...). Colour
    // only on a terminal, so a log redirected to a file carries no escape codes.
    use std::io::IsTerminal;
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("CAPSULE_LOG")
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(DEFAULT_LOG)),
        )
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr)
        .init();
    // A host runs many capsules on a worker per core; everything else runs one capsule or is a
    // client of one, on one worker (capsule_actors::workers says why).
    let workers = match cli.command {
        Command::Host(_) => Workers::PerCore,
        _ => Workers::One,
    };
    let rt = match capsule_actors::workers::runtime(workers) {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return ExitCode::from(70);
        }
    };
    let code = rt.block_on(async move {
        let _floor = capsule_actors::timer_floor::spawn_timer_floor();
        match cli.command {
            Command::Run(args) => cli_run::run(args).await,
            Command::Demo(args) => demo::demo(args).await,
            Command::Host(args) => host_cli::host(args).await,
            Command::Watch(args) => watch::watch(args).await,
            Command::Control(args) => control_cli::control(args).await,
            Command::Check(args) => inspect::check(args).await,
            Command::Ps(args) => inspect::ps(args),
            Command::Install(args) => install::install(args),
            Command::Completions { shell } => {
                use clap::CommandFactory;
                clap_complete::generate(shell, &mut Cli::command(), "capsule", &mut std::io::stdout());
                ExitCode::SUCCESS
            }
            Command::StubProvider { script, port } => match capsule_stub::serve_cli(&script, port).await {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("error: {}", cli_run::chain(&e));
                    ExitCode::from(2)
                }
            },
        }
    });
    // A tool compiled in the background writes its `.cwasm` before the process ends, so the
    // next launch finds it.
    capsule_runtime::finish_background_compiles();
    if std::env::var_os("CAPSULE_PRINT_PEAK_RSS").is_some() {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        if let Some(line) = status.lines().find(|l| l.starts_with("VmHWM:")) {
            eprintln!("peak_rss {}", line.trim_start_matches("VmHWM:").trim());
        }
    }
    code
}
