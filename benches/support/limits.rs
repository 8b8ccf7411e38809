//! The open-file limit for benches that start many capsules (each holds a door listener and
//! open journal files).

/// (soft, hard) RLIMIT_NOFILE from /proc/self/limits.
fn nofile() -> (u64, u64) {
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let line = limits.lines().find(|l| l.starts_with("Max open files")).unwrap_or_default();
    let n: Vec<u64> = line.split_whitespace().filter_map(|w| w.parse().ok()).collect();
    (n.first().copied().unwrap_or(0), n.get(1).copied().unwrap_or(0))
}

/// Make sure `need` descriptors can be open: raise the soft limit to the hard one with
/// `prlimit` when it is lower. Returns what was done, for the report.
pub fn ensure_nofile(need: u64) -> String {
    let (soft, hard) = nofile();
    if soft >= need {
        return format!("soft RLIMIT_NOFILE {soft} ≥ {need} needed; unchanged");
    }
    let pid = std::process::id().to_string();
    let ok = std::process::Command::new("prlimit")
        .args(["--pid", &pid, &format!("--nofile={hard}:{hard}")])
        .status()
        .is_ok_and(|s| s.success());
    let (now, _) = nofile();
    format!(
        "soft RLIMIT_NOFILE {soft} < {need} needed; prlimit {} → {now} (hard {hard})",
        if ok { "raised it" } else { "FAILED" }
    )
}
