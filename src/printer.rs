//! Prints a session's frames to the terminal as they happen: the reply as it streams, tool
//! calls, statuses; or, with `--json`, one JSON object per frame. Reports each task's final
//! status to the caller, so `capsule run` knows when to exit.

use crate::call_inputs::CallInputs;
use capsule_actors::Session;
use capsule_protocol::frame::{Frame, NumberedFrame, TaskState};
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

/// Print one frame in `style` (`capsule watch` prints the frames it reads this way too). With
/// `inputs` (the session's trace, when printing in-process), a finished tool call also shows
/// its input, shortened.
pub(crate) fn print_frame(f: &NumberedFrame, style: Style, inputs: Option<&mut CallInputs>) {
    let mut text = Vec::new();
    render_frame(f, style, inputs, &mut text);
    write_out(&text);
}

/// What [`print_frame`] prints for `f`, added to `out`.
fn render_frame(f: &NumberedFrame, style: Style, inputs: Option<&mut CallInputs>, out: &mut Vec<u8>) {
    use std::sync::atomic::Ordering;
    let terminal = terminal();
    // A live progress line is replaced by whatever comes next.
    if style == Style::Human && PROGRESS_OPEN.swap(false, Ordering::Relaxed) {
        let _ = write!(out, "\r\x1b[K");
    }
    if style == Style::Json {
        let _ = writeln!(out, "{}", f.json_line());
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
            // The first line, and whether there are more, without copying or counting them all.
            let mut lines = artifact.content.as_deref().unwrap_or_default().lines();
            let first = lines.next().unwrap_or("");
            let more = if lines.next().is_some() { " …" } else { "" };
            let input = match (inputs, &artifact.tool_call_id) {
                (Some(inputs), Some(id)) => inputs.take(id).map(|i| format!(" {}", dim(&i))).unwrap_or_default(),
                _ => String::new(),
            };
            let _ = writeln!(out, "{mark} {}{input} {first}{more}", artifact.tool_name.as_deref().unwrap_or_default());
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
}

/// Write `bytes` to stdout at once: a system call for all of them (two when they end inside a
/// line), not one per line as stdout's line buffering would make it.
fn write_out(bytes: &[u8]) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(bytes);
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
    let mut inputs = CallInputs::new(session.dir.join("trace.jsonl"));
    let session = session.clone();
    tokio::spawn(async move {
        'frames: while let Some(first) = frames.recv().await {
            // The session's own work first: a frame wakes this task in the middle of a turn,
            // and on `capsule run`'s one worker a task woken there runs next, ahead of the
            // journal's step, the tool's wake-up and the next request. Yielding puts the
            // printing behind them (into the provider's wait, or the tool's run).
            tokio::task::yield_now().await;
            // The frames that have already arrived go out with it, up to a task's final status
            // (it is answered before anything after it is printed).
            let mut burst = vec![first];
            while burst.len() < BURST && !is_final(&burst[burst.len() - 1]) {
                match frames.try_recv() {
                    Ok(f) => burst.push(f),
                    Err(_) => break,
                }
            }
            // The burst in one write: a turn's frames often come together.
            let mut text = Vec::new();
            for f in &burst {
                if style == Style::Json {
                    // The line around the data serialized once at publication.
                    text.extend_from_slice(f.json_line().as_bytes());
                    text.push(b'\n');
                } else {
                    render_frame(f, style, Some(&mut inputs), &mut text);
                }
            }
            write_out(&text);
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
