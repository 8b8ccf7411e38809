//! Prints a session's frames to the terminal as they happen: the reply as it streams, tool
//! calls, statuses; or, with `--json`, one JSON object per frame. Reports each task's final
//! status to the caller, so `capsule run` knows when to exit.

use capsule_actors::Session;
use capsule_protocol::frame::{Frame, NumberedFrame, SharedFrame, TaskState};
use std::io::Write;
use std::sync::Arc;
use tokio::sync::mpsc;

/// Whether stdout is a terminal, asked once (an `ioctl` per frame otherwise).
fn terminal() -> bool {
    use std::io::IsTerminal;
    static TERMINAL: std::sync::LazyLock<bool> = std::sync::LazyLock::new(|| std::io::stdout().is_terminal());
    *TERMINAL
}

/// Dim text on a terminal; plain text when stdout is a pipe or a file.
fn dim(text: &str) -> String {
    if terminal() { format!("\x1b[2m{text}\x1b[0m") } else { text.to_string() }
}

/// Output style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Human-readable.
    Human,
    /// JSON lines.
    Json,
}

/// Whether a live progress line (no newline yet) is on the terminal.
static PROGRESS_OPEN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A tool call's input, shortened to one line, from the session's trace (`tool_call_started` is
/// journaled before the tool runs; no frame carries the input). The call has just finished, so
/// its line is near the end: the last [`TAIL`] bytes are searched first, the whole trace only
/// when the line is not there (a long session's trace is not read once per call).
fn call_input(trace: &std::path::Path, call_id: &str) -> Option<String> {
    const SHOWN: usize = 80;
    let found = |text: &str| {
        text.lines().rev().find(|l| l.contains("\"tool_call_started\"") && l.contains(call_id)).map(str::to_string)
    };
    let line = match tail(trace, TAIL).and_then(|t| found(&t)) {
        Some(line) => line,
        None => found(&std::fs::read_to_string(trace).ok()?)?,
    };
    let event: serde_json::Value = serde_json::from_str(&line).ok()?;
    if event["tool_call_id"] != call_id {
        return None;
    }
    let input = event["input"].to_string();
    Some(if input.chars().count() > SHOWN {
        format!("{}…", input.chars().take(SHOWN).collect::<String>())
    } else {
        input
    })
}

/// How much of the end of the trace [`call_input`] reads first.
const TAIL: u64 = 64 * 1024;

/// The last `bytes` of `path` (its whole text when shorter), from the first line that starts
/// in them.
fn tail(path: &std::path::Path, bytes: u64) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).ok()?;
    let len = f.metadata().ok()?.len();
    let start = len.saturating_sub(bytes);
    f.seek(SeekFrom::Start(start)).ok()?;
    let mut buf = Vec::with_capacity((len - start) as usize);
    f.read_to_end(&mut buf).ok()?;
    let text = String::from_utf8_lossy(&buf);
    // A cut line at the start is not whole: drop it.
    Some(if start == 0 {
        text.into_owned()
    } else {
        text.split_once('\n').map_or(String::new(), |(_, rest)| rest.to_string())
    })
}

/// Print one frame in `style` (`capsule watch` prints the frames it reads this way too). With
/// `trace` (the session's `trace.jsonl`, when printing in-process), a finished tool call also
/// shows its input, shortened.
pub(crate) fn print_frame(f: &NumberedFrame, style: Style, trace: Option<&std::path::Path>) {
    use std::sync::atomic::Ordering;
    let mut out = std::io::stdout().lock();
    let terminal = terminal();
    // A live progress line is replaced by whatever comes next.
    if style == Style::Human && PROGRESS_OPEN.swap(false, Ordering::Relaxed) {
        let _ = write!(out, "\r\x1b[K");
    }
    if style == Style::Json {
        let _ = writeln!(out, "{}", f.json_line());
        let _ = out.flush();
        return;
    }
    match &f.frame {
        Frame::Text { text, is_final, .. } => {
            let _ = write!(out, "{text}");
            if *is_final {
                let _ = writeln!(out);
            }
        }
        Frame::Thinking { text, .. } => {
            let _ = write!(out, "{}", dim(text));
        }
        Frame::ToolCallStarted { tool_name, tool_call_id, .. } => {
            let _ = writeln!(out, "\n→ {tool_name} ({tool_call_id})");
        }
        // On a terminal, the bytes of a call's input the model has written so far, on one line
        // that the next frame replaces.
        Frame::ToolCallProgress { input_bytes, .. } if terminal => {
            let _ = write!(out, "{}", dim(&format!("  … {input_bytes} bytes of input")));
            PROGRESS_OPEN.store(true, Ordering::Relaxed);
        }
        Frame::Artifact { artifact, .. } => {
            let mark = if artifact.is_error == Some(true) { "✗" } else { "✓" };
            let content = artifact.content.clone().unwrap_or_default();
            let first = content.lines().next().unwrap_or("");
            let more = if content.lines().count() > 1 { " …" } else { "" };
            let input = match (trace, &artifact.tool_call_id) {
                (Some(t), Some(id)) => call_input(t, id).map(|i| format!(" {}", dim(&i))).unwrap_or_default(),
                _ => String::new(),
            };
            let _ = writeln!(out, "{mark} {}{input} {}{more}", artifact.tool_name.clone().unwrap_or_default(), first);
        }
        Frame::Status { status, .. } => match status.state {
            TaskState::Working => {
                let _ = writeln!(out, "{}", dim(&format!("[{}]", status.message)));
            }
            TaskState::Completed => {}
            other => {
                let _ = writeln!(
                    out,
                    "{}: {}",
                    serde_json::to_value(other).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
                    status.message
                );
            }
        },
        _ => {}
    }
    let _ = out.flush();
}

/// Subscribe and print every frame; each final status is sent on the returned channel as
/// `(task id, state)`. When a task waits for a person (`input-required`), the next line of
/// stdin is its answer (stdin at its end answers nothing: a door client can still answer).
pub async fn start(session: &Arc<Session>, style: Style) -> mpsc::UnboundedReceiver<(String, TaskState)> {
    let (tx, rx) = mpsc::unbounded_channel();
    let Some(mut frames) = session.subscribe(None).await else {
        return rx;
    };
    let trace = session.dir.join("trace.jsonl");
    let session = session.clone();
    tokio::spawn(async move {
        'frames: while let Some(first) = frames.recv().await {
            // The frames that have already arrived go out with it, up to a task's final status
            // (it is answered before anything after it is printed).
            let mut burst = vec![first];
            while burst.len() < BURST && !is_final(&burst[burst.len() - 1]) {
                match frames.try_recv() {
                    Ok(f) => burst.push(f),
                    Err(_) => break,
                }
            }
            if style == Style::Json {
                print_json_lines(&burst);
            } else {
                for f in &burst {
                    print_frame(f, style, Some(&trace));
                }
            }
            for f in &burst {
                if let Frame::Status { id, status, .. } = &f.frame
                    && status.state == TaskState::InputRequired
                {
                    answer_from_stdin(session.clone(), id.clone());
                }
                if let Frame::Status { id, status, is_final: true, .. } = &f.frame
                    && tx.send((id.clone(), status.state)).is_err()
                {
                    break 'frames;
                }
            }
        }
    });
    rx
}

/// The most frames printed in one write.
const BURST: usize = 64;

fn is_final(f: &NumberedFrame) -> bool {
    matches!(f.frame, Frame::Status { is_final: true, .. })
}

/// `--json` lines of frames that arrived together, in one write: the bytes [`print_frame`]
/// prints for each, in order. A turn's frames often come in a burst, and stdout writes out
/// every line it is given at once, a system call each.
fn print_json_lines(burst: &[SharedFrame]) {
    let mut text = String::new();
    for f in burst {
        text.push_str(&f.json_line());
        text.push('\n');
    }
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

/// Read one line from stdin in the background and give it to the waiting task.
fn answer_from_stdin(session: Arc<Session>, task_id: String) {
    tokio::spawn(async move {
        let line = tokio::task::spawn_blocking(|| {
            let mut line = String::new();
            std::io::stdin().read_line(&mut line).ok().filter(|n| *n > 0).map(|_| line)
        })
        .await
        .ok()
        .flatten();
        if let Some(line) = line {
            let answer = line.trim_end_matches(['\n', '\r']);
            if let Ok(Some(Err(e))) = session.provide_input(&task_id, answer).await {
                eprintln!("warning: the answer was not taken: {e}");
            }
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn started(id: &str, path: &str) -> String {
        format!(
            "{}\n",
            serde_json::json!({"event_type": "tool_call_started", "tool_call_id": id, "input": {"path": path}})
        )
    }

    #[test]
    fn a_calls_input_is_found_in_the_traces_tail_or_else_in_the_whole_trace() {
        let dir = tempfile::tempdir().expect("tempdir");
        let trace = dir.path().join("trace.jsonl");
        // `early` is far before the tail; `late` is in it.
        let filler = format!("{}\n", serde_json::json!({"event_type": "inference", "pad": "x".repeat(1000)}));
        let mut text = started("early", "first");
        for _ in 0..(2 * TAIL as usize / filler.len()) {
            text.push_str(&filler);
        }
        text.push_str(&started("late", "second"));
        std::fs::write(&trace, &text).expect("write");
        let tail_text = tail(&trace, TAIL).expect("tail");
        assert!(tail_text.len() as u64 <= TAIL && tail_text.contains("\"late\"") && !tail_text.contains("\"early\""));
        assert!(tail_text.starts_with('{'), "the tail starts at a whole line");
        assert_eq!(call_input(&trace, "late").as_deref(), Some(r#"{"path":"second"}"#));
        assert_eq!(call_input(&trace, "early").as_deref(), Some(r#"{"path":"first"}"#));
        assert_eq!(call_input(&trace, "never"), None);
    }
}
