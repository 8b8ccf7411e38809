//! Host file access that never follows a path a guest could have written.
//!
//! Every host-side open below a capsule's folder goes through a [`Beneath`]: a directory handle
//! opened with `O_NOFOLLOW`. Relative paths are walked one component at a time with
//! `openat(O_NOFOLLOW)`, so a symlink anywhere on the way is refused (`ELOOP`/`ENOTDIR`), `..`
//! and absolute paths are refused before any syscall, and files are checked after opening to
//! be regular files with one link, owned by this process's user. New folders are `0700`, new
//! files `0600`.
//!
//! A tool's preopen is resolved the same way, then handed to WASI as `/proc/self/fd/<n>`: the
//! kernel opens exactly the directory already resolved, so swapping a path for a symlink
//! between the check and the open cannot widen a scope.

use rustix::fs::{FileType, Mode, OFlags};
use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};

/// Why a path beneath a directory could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum BeneathError {
    /// The relative path has `..`, is absolute, or has an empty or `.` component.
    #[error("`{path}` is not a plain relative path (no `..`, no leading `/`, no empty parts)")]
    NotPlain {
        /// The path as given.
        path: String,
    },
    /// A component is a symlink (or not a folder where one is needed).
    #[error("`{path}` under {root} is a symlink or not a folder; the host never follows links there")]
    Link {
        /// The folder it was resolved from.
        root: PathBuf,
        /// The path as given.
        path: String,
    },
    /// The file exists but is not a regular file this user owns with a single link.
    #[error("{path} is not a regular file owned by this user with one link ({what})")]
    NotOwnedRegular {
        /// The file.
        path: PathBuf,
        /// What was wrong.
        what: &'static str,
    },
    /// The operating system refused.
    #[error("{path}: {source}")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
}

impl BeneathError {
    /// The underlying I/O error kind, when there is one.
    pub fn io_kind(&self) -> Option<std::io::ErrorKind> {
        match self {
            BeneathError::Io { source, .. } => Some(source.kind()),
            _ => None,
        }
    }
}

/// How to open a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileMode {
    /// Read an existing file.
    Read,
    /// Append, creating it `0600` when missing.
    Append,
    /// Read and append, creating it `0600` when missing.
    ReadAppend,
    /// Replace the contents, creating it `0600` when missing.
    Truncate,
}

/// A directory handle that all host opens below it go through.
#[derive(Debug)]
pub struct Beneath {
    fd: OwnedFd,
    path: PathBuf,
}

fn io(path: &Path) -> impl FnOnce(rustix::io::Errno) -> BeneathError + '_ {
    move |e| BeneathError::Io { path: path.to_path_buf(), source: e.into() }
}

const DIR_FLAGS: OFlags = OFlags::RDONLY.union(OFlags::DIRECTORY).union(OFlags::NOFOLLOW).union(OFlags::CLOEXEC);

/// The components of a plain relative path; `.` alone (or empty) is the folder itself.
pub fn plain_parts(rel: &str) -> Result<Vec<&str>, BeneathError> {
    let bad = || BeneathError::NotPlain { path: rel.to_string() };
    if rel.starts_with('/') || rel.contains('\0') || rel.contains('\\') {
        return Err(bad());
    }
    let trimmed = rel.trim_end_matches('/');
    if trimmed.is_empty() || trimmed == "." {
        return Ok(Vec::new());
    }
    let parts: Vec<&str> = trimmed.split('/').collect();
    let parts: Vec<&str> = match parts.first() {
        Some(&".") => parts[1..].to_vec(),
        _ => parts,
    };
    if parts.iter().any(|p| p.is_empty() || *p == "." || *p == "..") {
        return Err(bad());
    }
    Ok(parts)
}

impl Beneath {
    /// Open `path` as the root. The host chose `path`; only its last component is checked
    /// (it must be a folder, not a symlink).
    pub fn open(path: &Path) -> Result<Beneath, BeneathError> {
        let fd = rustix::fs::open(path, DIR_FLAGS, Mode::empty()).map_err(|e| link_or_io(e, path, "."))?;
        Ok(Beneath { fd, path: path.to_path_buf() })
    }

    /// Create `path` (and its parents) when missing, make it `0700`, and open it as a root.
    pub fn create(path: &Path) -> Result<Beneath, BeneathError> {
        if let Err(source) = std::fs::create_dir_all(path) {
            return Err(BeneathError::Io { path: path.to_path_buf(), source });
        }
        let b = Beneath::open(path)?;
        rustix::fs::fchmod(&b.fd, Mode::from_raw_mode(0o700)).map_err(io(path))?;
        Ok(b)
    }

    /// Open the file at `path` (a folder the host made, then one file name in it); see
    /// [`Beneath::file`].
    pub fn file_at(path: &Path, mode: FileMode) -> Result<File, BeneathError> {
        let (Some(parent), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
            return Err(BeneathError::NotPlain { path: path.display().to_string() });
        };
        Beneath::open(parent)?.file(name, mode)
    }

    /// The user id this process runs as (the owner every session file must have).
    pub fn owner_uid(&self) -> u32 {
        rustix::process::geteuid().as_raw()
    }

    /// The path this handle was opened at (for messages; never reopened by name).
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// [`Beneath::dir`], taking this handle: for the folder itself (`rel` is `.`) the answer is
    /// this handle, not a second descriptor of it (a tool scoped to the workdir opens its
    /// folder at every call).
    pub fn into_dir(self, rel: &str, create: bool) -> Result<Beneath, BeneathError> {
        if plain_parts(rel)?.is_empty() { Ok(self) } else { self.dir(rel, create) }
    }

    /// The folder at `rel` below this one, walked without following any symlink; with
    /// `create`, missing folders are made `0700`.
    pub fn dir(&self, rel: &str, create: bool) -> Result<Beneath, BeneathError> {
        let parts = plain_parts(rel)?;
        let mut cur = rustix::io::dup(&self.fd).map_err(io(&self.path))?;
        let mut path = self.path.clone();
        for part in parts {
            path.push(part);
            let opened = match rustix::fs::openat(&cur, part, DIR_FLAGS, Mode::empty()) {
                Err(rustix::io::Errno::NOENT) if create => {
                    match rustix::fs::mkdirat(&cur, part, Mode::from_raw_mode(0o700)) {
                        Ok(()) | Err(rustix::io::Errno::EXIST) => {}
                        Err(e) => return Err(io(&path)(e)),
                    }
                    rustix::fs::openat(&cur, part, DIR_FLAGS, Mode::empty())
                }
                other => other,
            };
            cur = opened.map_err(|e| link_or_io(e, &self.path, rel))?;
        }
        Ok(Beneath { fd: cur, path })
    }

    /// Open the file `name` (one component) in this folder, never through a symlink, and check
    /// it is a regular file with one link owned by this user. New files are `0600`.
    pub fn file(&self, name: &str, mode: FileMode) -> Result<File, BeneathError> {
        let parts = plain_parts(name)?;
        let [name] = parts.as_slice() else {
            return Err(BeneathError::NotPlain { path: name.to_string() });
        };
        let base = OFlags::NOFOLLOW | OFlags::CLOEXEC | OFlags::NONBLOCK;
        let flags = match mode {
            FileMode::Read => base | OFlags::RDONLY,
            FileMode::Append => base | OFlags::WRONLY | OFlags::APPEND | OFlags::CREATE,
            FileMode::ReadAppend => base | OFlags::RDWR | OFlags::APPEND | OFlags::CREATE,
            FileMode::Truncate => base | OFlags::WRONLY | OFlags::CREATE,
        };
        let path = self.path.join(name);
        let fd = rustix::fs::openat(&self.fd, *name, flags, Mode::from_raw_mode(0o600))
            .map_err(|e| link_or_io(e, &self.path, name))?;
        check_owned_regular(&fd, &path)?;
        if mode == FileMode::Truncate {
            rustix::fs::ftruncate(&fd, 0).map_err(io(&path))?;
        }
        // Clear O_NONBLOCK (it only guarded against a planted FIFO blocking the open).
        let fl = rustix::fs::fcntl_getfl(&fd).map_err(io(&path))?;
        rustix::fs::fcntl_setfl(&fd, fl - OFlags::NONBLOCK).map_err(io(&path))?;
        Ok(File::from(fd))
    }

    /// Whether `name` exists in this folder (without following it).
    pub fn exists(&self, name: &str) -> bool {
        rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).is_ok()
    }

    /// The names in this folder, without `.` and `..` (a name that is not UTF-8 is left out:
    /// the host makes none).
    pub fn names(&self) -> Result<Vec<String>, BeneathError> {
        let dir = rustix::fs::Dir::read_from(&self.fd).map_err(io(&self.path))?;
        let mut names = Vec::new();
        for entry in dir {
            let entry = entry.map_err(io(&self.path))?;
            if let Ok(name) = entry.file_name().to_str()
                && name != "."
                && name != ".."
            {
                names.push(name.to_string());
            }
        }
        Ok(names)
    }

    /// The status of `name` (one component) in this folder; of a link itself, not its target.
    pub fn stat(&self, name: &str) -> Result<rustix::fs::Stat, BeneathError> {
        rustix::fs::statat(&self.fd, name, rustix::fs::AtFlags::SYMLINK_NOFOLLOW).map_err(io(&self.path.join(name)))
    }

    /// Remove the entry `name` (one component, not a folder) from this folder; a link is
    /// removed itself, never what it points at.
    pub fn remove(&self, name: &str) -> Result<(), BeneathError> {
        let parts = plain_parts(name)?;
        let [name] = parts.as_slice() else {
            return Err(BeneathError::NotPlain { path: name.to_string() });
        };
        rustix::fs::unlinkat(&self.fd, *name, rustix::fs::AtFlags::empty()).map_err(io(&self.path.join(name)))
    }

    /// Read a whole file (see [`Beneath::file`]).
    pub fn read_to_string(&self, name: &str) -> Result<String, BeneathError> {
        use std::io::Read;
        let mut f = self.file(name, FileMode::Read)?;
        let mut s = String::new();
        f.read_to_string(&mut s).map_err(|source| BeneathError::Io { path: self.path.join(name), source })?;
        Ok(s)
    }

    /// Replace a file's contents (see [`Beneath::file`]).
    pub fn write(&self, name: &str, bytes: &[u8]) -> Result<(), BeneathError> {
        use std::io::Write;
        let mut f = self.file(name, FileMode::Truncate)?;
        f.write_all(bytes).map_err(|source| BeneathError::Io { path: self.path.join(name), source })
    }

    /// A path that opens exactly this directory (`/proc/self/fd/<n>`), valid while `self`
    /// lives. Used to hand an already-resolved folder to WASI's preopen.
    pub fn fd_path(&self) -> PathBuf {
        PathBuf::from(format!("/proc/self/fd/{}", self.fd.as_fd().as_raw_fd()))
    }

    /// Which folder this handle is: its device and inode. Two handles with the same identity,
    /// one of them still open, are the same folder (an inode is not reused while a descriptor
    /// holds it, and a folder has no second name).
    pub fn identity(&self) -> Result<FolderId, BeneathError> {
        let st = rustix::fs::fstat(&self.fd).map_err(io(&self.path))?;
        Ok(FolderId { dev: st.st_dev, ino: st.st_ino })
    }
}

/// A folder's identity ([`Beneath::identity`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FolderId {
    dev: u64,
    ino: u64,
}

fn link_or_io(e: rustix::io::Errno, root: &Path, rel: &str) -> BeneathError {
    if e == rustix::io::Errno::LOOP || e == rustix::io::Errno::NOTDIR {
        BeneathError::Link { root: root.to_path_buf(), path: rel.to_string() }
    } else {
        BeneathError::Io { path: root.join(rel), source: e.into() }
    }
}

fn check_owned_regular(fd: &OwnedFd, path: &Path) -> Result<(), BeneathError> {
    let st = rustix::fs::fstat(fd).map_err(io(path))?;
    let bad = |what| Err(BeneathError::NotOwnedRegular { path: path.to_path_buf(), what });
    if FileType::from_raw_mode(st.st_mode) != FileType::RegularFile {
        return bad("not a regular file");
    }
    if st.st_uid != rustix::process::geteuid().as_raw() {
        return bad("owned by another user");
    }
    if st.st_nlink != 1 {
        return bad("hard-linked");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_parts_refuse_every_way_out() {
        for bad in ["/", "..", "../x", "a/../b", "/etc", "a//b", "a/./b", "a\\b", "a\0b"] {
            assert!(plain_parts(bad).is_err(), "{bad:?} accepted");
        }
        assert_eq!(plain_parts(".").expect("ok"), Vec::<&str>::new());
        assert_eq!(plain_parts("./data/in/").expect("ok"), vec!["data", "in"]);
    }

    #[test]
    fn a_symlinked_folder_or_file_is_refused_and_new_files_are_private() {
        let t = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::fs::write(outside.path().join("secret"), "s").expect("write");
        std::os::unix::fs::symlink(outside.path(), t.path().join("data")).expect("link");
        std::os::unix::fs::symlink(outside.path().join("secret"), t.path().join("result.txt")).expect("link");
        let root = Beneath::open(t.path()).expect("root");
        assert!(matches!(root.dir("data", true), Err(BeneathError::Link { .. })));
        assert!(matches!(root.dir("data/x", true), Err(BeneathError::Link { .. })));
        assert!(matches!(root.file("result.txt", FileMode::Truncate), Err(BeneathError::Link { .. })));
        assert_eq!(std::fs::read_to_string(outside.path().join("secret")).expect("read"), "s");
        let made = root.dir("a/b", true).expect("made");
        made.write("f", b"x").expect("write");
        use std::os::unix::fs::PermissionsExt;
        let meta = std::fs::metadata(t.path().join("a/b/f")).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o777, 0o600);
        let meta = std::fs::metadata(t.path().join("a/b")).expect("meta");
        assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    }

    #[test]
    fn hard_links_and_fifos_are_not_regular_owned_files() {
        let t = tempfile::tempdir().expect("tmp");
        std::fs::write(t.path().join("orig"), "x").expect("write");
        std::fs::hard_link(t.path().join("orig"), t.path().join("linked")).expect("hardlink");
        rustix::fs::mkfifoat(rustix::fs::CWD, t.path().join("fifo"), Mode::from_raw_mode(0o600)).expect("fifo");
        let root = Beneath::open(t.path()).expect("root");
        assert!(matches!(root.file("linked", FileMode::Append), Err(BeneathError::NotOwnedRegular { .. })));
        // A FIFO with no reader is refused without blocking: by the open (ENXIO) or the check.
        assert!(root.file("fifo", FileMode::Truncate).is_err());
        assert!(matches!(root.file("fifo", FileMode::Read), Err(BeneathError::NotOwnedRegular { .. })));
    }

    #[test]
    fn into_dir_is_the_folder_itself_for_dot_and_walks_like_dir_below_it() {
        use std::os::unix::fs::MetadataExt;
        let t = tempfile::tempdir().expect("tmp");
        let outside = tempfile::tempdir().expect("tmp");
        std::os::unix::fs::symlink(outside.path(), t.path().join("link")).expect("link");
        let inode = |b: &Beneath| std::fs::metadata(b.fd_path()).expect("stat").ino();
        let root = Beneath::open(t.path()).expect("root");
        let root_ino = inode(&root);
        for dot in [".", "./", ""] {
            let same = Beneath::open(t.path()).expect("root").into_dir(dot, true).expect("itself");
            assert_eq!(inode(&same), root_ino, "{dot:?}");
            assert_eq!(same.path(), t.path());
        }
        let made = root.into_dir("a/b", true).expect("made");
        assert_eq!(made.path(), t.path().join("a/b"));
        assert_eq!(inode(&made), std::fs::metadata(t.path().join("a/b")).expect("stat").ino());
        for bad in ["link", "link/x", "..", "/etc"] {
            let r = Beneath::open(t.path()).expect("root").into_dir(bad, true);
            assert!(r.is_err(), "{bad:?} accepted");
        }
        assert!(std::fs::read_dir(outside.path()).expect("read").next().is_none(), "nothing made through the link");
    }

    #[test]
    fn the_fd_path_opens_the_resolved_folder_even_after_a_swap() {
        let t = tempfile::tempdir().expect("tmp");
        let root = Beneath::open(t.path()).expect("root");
        let data = root.dir("data", true).expect("data");
        std::fs::rename(t.path().join("data"), t.path().join("moved")).expect("rename");
        std::os::unix::fs::symlink("/", t.path().join("data")).expect("link");
        std::fs::write(t.path().join("moved/inside"), "y").expect("write");
        let via_fd = std::fs::read_to_string(data.fd_path().join("inside")).expect("read via fd");
        assert_eq!(via_fd, "y");
    }
}
