//! Keeping the component cache folder from growing without end.
//!
//! A `.cwasm` is named by its wasm's hash and the engine's compatibility hash, so each new
//! build of an artifact and each runtime upgrade leaves the files of the last one behind (1–2
//! MB each). What a user can rely on:
//!
//! - Loading a `.cwasm` from disk marks it used: its modification time is set to now when it
//!   is older than [`FRESHEN_AFTER`] (at most one metadata write per file a day).
//! - When a process compiles a component and writes its `.cwasm` (the one moment the folder
//!   grows), it removes the `.cwasm` files no launch has used for [`UNUSED_FOR`], and the
//!   temporary files of writes that stopped midway once they are older than [`TEMP_AGE`] (a
//!   younger one may be another process writing right now).
//! - Only names this cache makes are touched (`<64 hex>-<16 hex>.cwasm`, and those or
//!   `cache.key` followed by `.tmp<pid>`), only regular files this user owns, never through a
//!   link. `cache.key` and anything else in the folder stay.
//!
//! A file removed while another process is reading it stays readable through that process's
//! descriptor; a process that looks for it afterwards compiles the component again.

use std::fs::File;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::beneath::{Beneath, BeneathError};

/// A `.cwasm` no launch has loaded or written for this long is removed.
pub(crate) const UNUSED_FOR: Duration = Duration::from_secs(30 * 24 * 3600);

/// A load marks its `.cwasm` used again once its mark is this old.
pub(crate) const FRESHEN_AFTER: Duration = Duration::from_secs(24 * 3600);

/// A temporary file this old is the rest of a write that never finished.
pub(crate) const TEMP_AGE: Duration = Duration::from_secs(3600);

/// The cache's private key file (never removed).
pub(crate) const KEY_FILE: &str = "cache.key";

/// Mark `file` (a `.cwasm` just loaded) used at `now`, when its mark is older than
/// [`FRESHEN_AFTER`]. A failure only means the file may be pruned sooner; it is logged.
pub(crate) fn freshen(file: &File, now: SystemTime) {
    let stale = match file.metadata().and_then(|m| m.modified()) {
        Ok(modified) => now.duration_since(modified).is_ok_and(|age| age > FRESHEN_AFTER),
        Err(_) => true,
    };
    if stale && let Err(e) = file.set_modified(now) {
        tracing::debug!(error = %e, "could not mark a cached component used");
    }
}

/// Remove from the cache folder `dir` what is stale at `now` (see the module docs); the names
/// removed, in folder order. Fails only when the folder itself cannot be opened or listed.
pub(crate) fn prune(dir: &Path, now: SystemTime) -> Result<Vec<String>, BeneathError> {
    let root = Beneath::open(dir)?;
    let me = root.owner_uid();
    let mut removed = Vec::new();
    for name in root.names()? {
        let max_age = if is_cwasm(&name) {
            UNUSED_FOR
        } else if is_temp(&name) {
            TEMP_AGE
        } else {
            continue;
        };
        // Gone since the listing (another process pruning too), or not ours to judge.
        let Ok(st) = root.stat(&name) else { continue };
        let regular = rustix::fs::FileType::from_raw_mode(st.st_mode) == rustix::fs::FileType::RegularFile;
        if !regular || st.st_uid != me {
            continue;
        }
        let modified = UNIX_EPOCH + Duration::from_secs(u64::try_from(st.st_mtime).unwrap_or(0));
        if now.duration_since(modified).is_ok_and(|age| age > max_age) {
            // Gone meanwhile (another process pruning), or changed since its status was read:
            // one entry that cannot go does not keep the others.
            match root.remove(&name) {
                Ok(()) => removed.push(name),
                Err(e) => tracing::debug!(name = %name, error = %e, "left a cache file in place"),
            }
        }
    }
    Ok(removed)
}

/// The file name of the component whose wasm hashes to `content`, for the engine whose
/// compatibility hash is `compat` (16 lowercase hex digits).
pub(crate) fn cwasm_name(content: &[u8; 32], compat: &str) -> String {
    format!("{}-{compat}.cwasm", hex::encode(content))
}

/// The name a write of `base` goes to before it is renamed into place (one per process).
pub(crate) fn temp_name(base: &str) -> String {
    format!("{base}.tmp{}", std::process::id())
}

/// `<64 lowercase hex>-<16 lowercase hex>.cwasm`: a name [`cwasm_name`] makes.
pub(crate) fn is_cwasm(name: &str) -> bool {
    let hex = |s: &str, len: usize| s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    name.strip_suffix(".cwasm")
        .and_then(|stem| stem.split_once('-'))
        .is_some_and(|(content, compat)| hex(content, 64) && hex(compat, 16))
}

/// A `.cwasm` name or the key file's, then `.tmp` and a process id: a write in progress or
/// one that stopped midway.
pub(crate) fn is_temp(name: &str) -> bool {
    name.rsplit_once(".tmp").is_some_and(|(base, pid)| {
        !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()) && (base == KEY_FILE || is_cwasm(base))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    const DAY: Duration = Duration::from_secs(24 * 3600);

    fn cwasm(n: u8) -> String {
        format!("{}-{}.cwasm", format!("{n:02x}").repeat(32), "0123456789abcdef")
    }

    /// A file `name` in `dir` last modified `age` before `now`.
    fn aged(dir: &Path, name: &str, now: SystemTime, age: Duration) {
        let path = dir.join(name);
        std::fs::write(&path, b"code").expect("write");
        File::options().write(true).open(&path).expect("open").set_modified(now - age).expect("set mtime");
    }

    fn listing(dir: &Path) -> Vec<String> {
        let mut names: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .map(|e| e.expect("entry").file_name().into_string().expect("utf-8"))
            .collect();
        names.sort();
        names
    }

    #[test]
    fn names_of_the_cache_and_no_others() {
        let made = cwasm_name(&[0xab; 32], "0123456789abcdef");
        assert!(is_cwasm(&made), "{made}");
        assert!(is_temp(&temp_name(&made)) && is_temp(&temp_name(KEY_FILE)));
        assert!(is_cwasm(&cwasm(1)));
        assert!(!is_cwasm(&cwasm(1).to_uppercase()));
        assert!(!is_cwasm("abc-0123456789abcdef.cwasm"), "content hash too short");
        assert!(!is_cwasm(&format!("{}-0123.cwasm", "a".repeat(64))), "compat hash too short");
        assert!(!is_cwasm(&format!("{}-{}.wasm", "a".repeat(64), "b".repeat(16))));
        assert!(!is_cwasm(KEY_FILE));
        assert!(is_temp(&format!("{}.tmp4242", cwasm(1))));
        assert!(is_temp("cache.key.tmp7"));
        assert!(!is_temp("cache.key.tmp"), "no pid");
        assert!(!is_temp("cache.key.tmpx1"));
        assert!(!is_temp("notes.txt.tmp12"), "not a name the cache writes");
    }

    #[test]
    fn removes_only_stale_cache_files() {
        let dir = tempfile::tempdir().expect("dir");
        let outside = tempfile::tempdir().expect("outside");
        let d = dir.path();
        let now = SystemTime::now();
        aged(d, &cwasm(1), now, 31 * DAY); // unused 31 days: removed
        aged(d, &cwasm(2), now, 29 * DAY); // used 29 days ago: kept
        aged(d, &format!("{}.tmp99", cwasm(3)), now, 2 * TEMP_AGE); // a dead write: removed
        aged(d, &format!("{}.tmp98", cwasm(4)), now, TEMP_AGE / 2); // maybe being written: kept
        aged(d, "cache.key.tmp97", now, 2 * TEMP_AGE); // removed
        aged(d, KEY_FILE, now, 400 * DAY); // the key: kept
        aged(d, "notes.txt", now, 400 * DAY); // not the cache's: kept
        aged(d, "abc-0123456789abcdef.cwasm", now, 400 * DAY); // not a name it makes: kept
        // A link named like a stale `.cwasm`, to an old file outside: both stay.
        aged(outside.path(), "target", now, 400 * DAY);
        symlink(outside.path().join("target"), d.join(cwasm(5))).expect("symlink");
        // A folder named like one: stays.
        std::fs::create_dir(d.join(cwasm(6))).expect("mkdir");

        let mut removed = prune(d, now).expect("prune");
        removed.sort();
        let mut expected = vec![cwasm(1), format!("{}.tmp99", cwasm(3)), "cache.key.tmp97".to_string()];
        expected.sort();
        assert_eq!(removed, expected);
        let mut left = vec![
            cwasm(2),
            format!("{}.tmp98", cwasm(4)),
            KEY_FILE.to_string(),
            "notes.txt".to_string(),
            "abc-0123456789abcdef.cwasm".to_string(),
            cwasm(5),
            cwasm(6),
        ];
        left.sort();
        assert_eq!(listing(d), left);
        assert!(outside.path().join("target").exists(), "a link's target is never removed");
        // Nothing left to do.
        assert_eq!(prune(d, now).expect("again"), Vec::<String>::new());
    }

    #[test]
    fn a_load_marks_an_old_mark_only() {
        let dir = tempfile::tempdir().expect("dir");
        let now = SystemTime::now();
        let mtime = |name: &str| std::fs::metadata(dir.path().join(name)).expect("meta").modified().expect("mtime");
        aged(dir.path(), "old", now, 2 * DAY);
        aged(dir.path(), "recent", now, DAY / 2);
        let before = mtime("recent");
        for name in ["old", "recent"] {
            freshen(&File::open(dir.path().join(name)).expect("open"), now);
        }
        let since = |name: &str| now.duration_since(mtime(name)).unwrap_or_default();
        assert!(
            since("old") < Duration::from_secs(2),
            "a mark older than a day is set to now, through a read-only descriptor"
        );
        assert_eq!(mtime("recent"), before, "a recent mark is not written again");
    }
}
