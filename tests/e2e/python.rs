//! The pinned Python environment some tests drive real clients from: a virtualenv under
//! `target/a2a-venv` with exactly `tests/a2a/requirements.txt`, made once and shared by every
//! test process (a file lock keeps two processes from building it at once). A machine without
//! `python3` fails the test naming what to install; nothing is skipped.

use std::path::PathBuf;
use std::process::Command;

use crate::common::repo;

fn run(cmd: &mut Command, what: &str) {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The venv's `python`, with the A2A SDK installed (built on first use).
pub fn a2a_python() -> PathBuf {
    let venv = repo().join("target/a2a-venv");
    let requirements = repo().join("tests/a2a/requirements.txt");
    let wanted = std::fs::read_to_string(&requirements).expect("tests/a2a/requirements.txt");
    let stamp = venv.join("installed-requirements.txt");
    let python = venv.join("bin/python");
    std::fs::create_dir_all(repo().join("target")).expect("target/");
    let lock = std::fs::File::create(repo().join("target/a2a-venv.lock")).expect("lock file");
    lock.lock().expect("lock the venv");
    if std::fs::read_to_string(&stamp).ok().as_deref() != Some(wanted.as_str()) || !python.exists() {
        let _ = std::fs::remove_dir_all(&venv);
        let system = std::env::var("PYTHON").unwrap_or_else(|_| "python3".into());
        run(
            Command::new(&system).args(["-m", "venv"]).arg(&venv),
            "making the Python venv for the A2A SDK tests (needs python3 with the venv module: apt-get install python3 python3-venv, or set PYTHON)",
        );
        run(
            Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-deps", "-r"])
                .arg(&requirements),
            "installing the pinned A2A SDK from PyPI (tests/a2a/requirements.txt)",
        );
        std::fs::write(&stamp, &wanted).expect("stamp");
    }
    python
}
