//! Prints a session's frames to the terminal: the reply as it streams, tool calls as they
//! happen; or, with `--json`, a `ready` line and then one JSON object per frame.

use capsule_actors::Session;
use capsule_protocol::frame::{Frame, NumberedFrame, TaskState};
use std::io::Write;
use tokio::sync::oneshot;

/// Output style.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// Human-readable.
    Human,
    /// JSON lines.
    Json,
}

/// A running printer.
pub struct Printer {
    done: Option<oneshot::Receiver<()>>,
    target: Option<oneshot::Sender<String>>,
}

fn print_frame(f: &NumberedFrame, style: Style) {
    let mut out = std::io::stdout().lock();
    if style == Style::Json {
        let _ = writeln!(out, "{}", f.to_json_line());
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
            let _ = write!(out, "\x1b[2m{text}\x1b[0m");
        }
        Frame::ToolCallStarted { tool_name, tool_call_id, .. } => {
            let _ = writeln!(out, "\n→ {tool_name} ({tool_call_id})");
        }
        Frame::Artifact { artifact, .. } => {
            let mark = if artifact.is_error == Some(true) { "✗" } else { "✓" };
            let content = artifact.content.clone().unwrap_or_default();
            let first = content.lines().next().unwrap_or("");
            let more = if content.lines().count() > 1 { " …" } else { "" };
            let _ = writeln!(out, "{mark} {} {}{more}", artifact.tool_name.clone().unwrap_or_default(), first);
        }
        Frame::Status { status, .. } if status.state == TaskState::Working => {
            let _ = writeln!(out, "\x1b[2m[{}]\x1b[0m", status.message);
        }
        Frame::Status { status, .. } if status.state == TaskState::Failed => {
            let _ = writeln!(out, "failed: {}", status.message);
        }
        _ => {}
    }
    let _ = out.flush();
}

impl Printer {
    /// Subscribe and start printing. In JSON style the `ready` line is printed first.
    pub async fn start(session: &Session, style: Style) -> Printer {
        if style == Style::Json {
            println!("{}", serde_json::json!({"type": "ready", "session_id": session.session_id, "workdir": session.workdir, "session_dir": session.dir}));
        } else {
            eprintln!("session {} · workdir {}", session.session_id, session.workdir.display());
        }
        let Some(mut rx) = session.subscribe(None).await else {
            return Printer { done: None, target: None };
        };
        let (done_tx, done_rx) = oneshot::channel();
        let (target_tx, mut target_rx) = oneshot::channel::<String>();
        tokio::spawn(async move {
            let mut target: Option<String> = None;
            let mut seen_final: Vec<String> = Vec::new();
            loop {
                tokio::select! {
                    t = &mut target_rx, if target.is_none() => {
                        match t {
                            Ok(t) => {
                                if seen_final.contains(&t) { break; }
                                target = Some(t);
                            }
                            Err(_) => break,
                        }
                    }
                    f = rx.recv() => {
                        let Some(f) = f else { break };
                        print_frame(&f, style);
                        if let Frame::Status { id, is_final: true, .. } = &f.frame {
                            if target.as_deref() == Some(id.as_str()) { break; }
                            seen_final.push(id.clone());
                        }
                    }
                }
            }
            let _ = done_tx.send(());
        });
        Printer { done: Some(done_rx), target: Some(target_tx) }
    }

    /// Wait until the final status of `task_id` has been printed.
    pub async fn finish(mut self, task_id: &str) {
        if let Some(t) = self.target.take() {
            let _ = t.send(task_id.to_string());
        }
        if let Some(d) = self.done.take() {
            let _ = d.await;
        }
    }
}
