//! Resuming a session after its process stopped: the folder is checked (nothing planted, no
//! damaged journal line), the interrupted task and its unfinished tool calls are read from the
//! trace, and the session starts again under the same id and files.

use capsule_runtime::Beneath;

use crate::error::LaunchError;
use crate::launch::LaunchOptions;
use crate::session::Session;

impl Session {
    /// Resume the session in `dir` (`<workdir>/<session id>`) after the process stopped: same
    /// id and files, frame ids continue, the conversation is rebuilt from its record. Call
    /// [`Session::resume_task`] to continue the task that was running.
    pub async fn resume(opts: LaunchOptions, dir: &std::path::Path) -> Result<Session, LaunchError> {
        Self::resume_with(opts, dir, false).await.map(|(s, _)| s)
    }

    /// [`Session::resume`], first checking every journal file: a torn last line is cut off and
    /// reported; damage in a complete line refuses the resume (`E-RUN-063`, naming the file
    /// and line) unless `repair`, which keeps each file's valid prefix and reports what it
    /// dropped. Returns the session and those reports.
    pub async fn resume_with(
        mut opts: LaunchOptions,
        dir: &std::path::Path,
        repair: bool,
    ) -> Result<(Session, Vec<String>), LaunchError> {
        let dir = std::fs::canonicalize(dir).map_err(|_| LaunchError::NotASession { path: dir.to_path_buf() })?;
        let session_id = dir
            .file_name()
            .and_then(|n| n.to_str())
            .filter(|n| n.starts_with("ses_") && dir.join("trace.jsonl").is_file())
            .map(str::to_string)
            .ok_or_else(|| LaunchError::NotASession { path: dir.clone() })?;
        opts.workdir = dir.parent().map(|p| p.to_path_buf()).unwrap_or_default();
        check_session_folder(&dir).map_err(LaunchError::Files)?;
        // A session that ended with nothing pending is not started again (checked before any
        // check or repair, so nothing is written).
        let (seed, ended) = read_seed(&crate::emitter::journal_records(&dir.join("trace.jsonl")));
        if ended && seed.task.is_none() && seed.queued.is_empty() {
            return Err(LaunchError::AlreadyEnded { session: session_id });
        }
        let (reports, next_frame_id) = crate::journal_check::check(&dir, repair)?;
        // The check changes a file only when it reports a cut; read the trace again only then.
        let (mut seed, _) = if reports.is_empty() {
            (seed, ended)
        } else {
            read_seed(&crate::emitter::journal_records(&dir.join("trace.jsonl")))
        };
        seed.next_frame_id = next_frame_id;
        let _ = std::fs::remove_file(dir.join("control.token"));
        let _ = std::fs::remove_file(dir.join(crate::session::DOOR_TOKEN_FILE));
        Self::start(opts, Some(session_id), Some(seed), None, crate::session::KeptKeys::default())
            .await
            .map(|s| (s, reports))
    }

    /// Resume, on this host, a clustered session whose owner was lost: take its lease (refused
    /// with `E-CLU-005` when another host has it), then read what to resume from its trace on
    /// JetStream, by the same rules as a local resume: finished tool calls are not run again,
    /// one left unfinished is reported interrupted, a provider call in flight is made again,
    /// and frame ids continue after the last one stored. Its local folder is made under
    /// `opts.workdir`. Call [`Session::resume_task`] to continue its tasks.
    pub async fn resume_from_cluster(
        opts: LaunchOptions,
        session_id: &str,
        kept: crate::session::KeptKeys,
    ) -> Result<Session, LaunchError> {
        let Some(c) = opts.cluster.clone() else {
            return Err(LaunchError::NotASession { path: session_id.into() });
        };
        let lease = c.leases.acquire(session_id, &c.name).await?;
        let (_, trace) = crate::cluster::StreamLog::open(&c.js, session_id, crate::cluster::Record::Trace).await?;
        let (seed, ended) = read_seed(&trace);
        if ended && seed.task.is_none() && seed.queued.is_empty() {
            let _ = lease.release().await;
            return Err(LaunchError::AlreadyEnded { session: session_id.to_string() });
        }
        // The emitter continues the frame ids after the last one on the frames subject.
        Self::start(opts, Some(session_id.to_string()), Some(seed), Some(lease), kept).await
    }
}

/// What a trace says to resume (the task that was running, the tasks queued behind it, tool
/// calls started and never finished), and whether its last record is `session_end`.
fn read_seed(trace: &[Vec<u8>]) -> (crate::agent_loop::ResumeSeed, bool) {
    let mut seed = crate::agent_loop::ResumeSeed::default();
    let mut finished = std::collections::HashSet::new();
    let mut ended = false;
    for line in trace {
        let Ok(ev) = serde_json::from_slice::<serde_json::Value>(line) else { continue };
        let field = |k: &str| ev[k].as_str().unwrap_or_default().to_string();
        let kind = ev["event_type"].as_str().unwrap_or("");
        ended = kind == "session_end";
        match kind {
            "task_queued" => seed.queued.push((field("task_id"), field("context_id"), field("text"))),
            "task_start" => {
                let id = field("task_id");
                seed.queued.retain(|q| q.0 != id);
                seed.task = Some((id, field("context_id")));
            }
            "task_end" => {
                let id = field("task_id");
                seed.queued.retain(|q| q.0 != id);
                if seed.task.as_ref().is_some_and(|t| t.0 == id) {
                    seed.task = None;
                }
            }
            "tool_call_started" => {
                seed.interrupted.insert(field("tool_call_id"));
            }
            "tool_call" => {
                finished.insert(field("tool_call_id"));
            }
            _ => {}
        }
    }
    seed.interrupted.retain(|id| !finished.contains(id));
    (seed, ended)
}

/// Refuse a session folder holding anything the host did not make: every entry must be a
/// regular file this user owns with one link, or the `out` folder holding only such files.
fn check_session_folder(dir: &std::path::Path) -> Result<(), capsule_runtime::BeneathError> {
    use capsule_runtime::BeneathError;
    use std::os::unix::fs::MetadataExt;
    let euid = Beneath::open(dir)?.owner_uid();
    let io = |path: &std::path::Path| {
        let path = path.to_path_buf();
        move |source| BeneathError::Io { path, source }
    };
    let mut folders = vec![dir.to_path_buf()];
    while let Some(folder) = folders.pop() {
        for entry in std::fs::read_dir(&folder).map_err(io(&folder))? {
            let path = entry.map_err(io(&folder))?.path();
            let meta = std::fs::symlink_metadata(&path).map_err(io(&path))?;
            let bad = |what| Err(BeneathError::NotOwnedRegular { path: path.clone(), what });
            if meta.uid() != euid {
                return bad("owned by another user");
            }
            if meta.file_type().is_symlink() {
                return bad("a symlink");
            }
            if meta.is_dir() && folder == dir && path.file_name().is_some_and(|n| n == "out") {
                folders.push(path);
                continue;
            }
            if !meta.is_file() {
                return bad("not a regular file");
            }
            if meta.nlink() != 1 {
                return bad("hard-linked");
            }
        }
    }
    Ok(())
}
