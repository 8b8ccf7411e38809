//! `capsule install <file.mur.zip | artifact folder>`: put one Murmur artifact package into a
//! capsule project's store (`<project>/.murmur/artifacts/<name>/<version>/`), or the user's
//! (`--global`: `~/.murmur/artifacts/`), with its `.sha256`, as `mur install` lays it out. A
//! folder is packed first (its `murmur.yaml` and `requires_files`). The package is read and
//! checked before anything is written. There is no network registry, so a name alone cannot be
//! installed. `murmur.lock` is left alone (as `mur install` does for local files): the next
//! launch writes it when there is none.

use capsule_actors::package;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use crate::cli_run::chain;

/// Options of `capsule install`.
#[derive(clap::Args, Debug, Clone)]
pub struct InstallArgs {
    /// A package (`<name>-<version>.mur.zip`) or an artifact folder holding its murmur.yaml.
    pub package: PathBuf,
    /// The capsule project to install into [default: the nearest folder, from the current one
    /// upwards, that holds a murmur.yaml].
    #[arg(long, conflicts_with = "global")]
    pub project: Option<PathBuf>,
    /// Install into ~/.murmur/artifacts, for every project of this user.
    #[arg(long)]
    pub global: bool,
}

fn project_root() -> Option<PathBuf> {
    let cwd = std::env::current_dir().ok()?;
    cwd.ancestors().find(|d| d.join("murmur.yaml").is_file()).map(Path::to_path_buf)
}

/// Run `capsule install`.
pub fn install(args: InstallArgs) -> ExitCode {
    let store = if args.global {
        match std::env::var_os("HOME") {
            Some(h) => PathBuf::from(h).join(".murmur").join("artifacts"),
            None => {
                eprintln!("error: --global needs $HOME to find ~/.murmur/artifacts");
                return ExitCode::from(2);
            }
        }
    } else {
        match args.project.clone().or_else(project_root) {
            Some(p) => p.join(".murmur").join("artifacts"),
            None => {
                eprintln!(
                    "error: no capsule project here: no murmur.yaml in this folder or above it (fix: run from the capsule's folder, or pass --project <folder>)"
                );
                return ExitCode::from(2);
            }
        }
    };
    let arg = &args.package;
    let bytes = if arg.is_dir() {
        package::build(arg)
    } else if arg.extension().is_some_and(|e| e == "zip") {
        std::fs::read(arg).map_err(|source| package::PackageError::Io { path: arg.clone(), source })
    } else {
        eprintln!(
            "error: `{}` is neither a .mur.zip nor an artifact folder; this runtime has no network registry, so a package is installed from a file or folder (fix: pass the path of a .mur.zip or of a folder holding the artifact's murmur.yaml)",
            arg.display()
        );
        return ExitCode::from(2);
    };
    match bytes.and_then(|b| package::install(&store, arg, &b)) {
        Ok(done) => {
            println!("installed {}@{} → {} (sha256 {})", done.name, done.version, done.path.display(), done.sha256);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("error: {}", chain(&e));
            ExitCode::from(2)
        }
    }
}
