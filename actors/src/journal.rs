//! The journal actor: owns the session's `trace.jsonl` and `conversation.jsonl`.
//!
//! Each line is written whole with one `write` call, then flushed, in the order messages
//! arrive; a `Flush` call returns only after everything sent before it is on disk (a
//! `sync_data`). It never drops a line silently: a failed write is logged and counted.

use capsule_protocol::neutral::Message;
use capsule_protocol::trace::TraceEvent;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::PathBuf;

/// Messages.
pub enum JournalMsg {
    /// Append a trace event.
    Trace(TraceEvent),
    /// Append a message to the conversation record.
    Record(Message),
    /// Make everything sent so far durable, then answer with the count of failed writes.
    Flush(RpcReplyPort<u64>),
}

/// Where the files are.
#[derive(Debug, Clone)]
pub struct JournalArgs {
    /// `trace.jsonl`.
    pub trace_path: PathBuf,
    /// `conversation.jsonl`.
    pub conversation_path: PathBuf,
}

/// State: the open files.
pub struct JournalState {
    trace: File,
    conversation: File,
    failed_writes: u64,
}

/// The actor.
pub struct Journal;

fn open_append(p: &PathBuf) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(p)
}

fn write_line(f: &mut File, value: &impl serde::Serialize, failed: &mut u64) {
    let mut line = match serde_json::to_vec(value) {
        Ok(l) => l,
        Err(e) => {
            tracing::error!(error = %e, "journal line not serializable");
            *failed += 1;
            return;
        }
    };
    line.push(b'\n');
    if let Err(e) = f.write_all(&line) {
        tracing::error!(error = %e, "journal write failed");
        *failed += 1;
    }
}

impl Actor for Journal {
    type Msg = JournalMsg;
    type State = JournalState;
    type Arguments = JournalArgs;

    async fn pre_start(&self, _myself: ActorRef<JournalMsg>, args: JournalArgs) -> Result<JournalState, ActorProcessingErr> {
        Ok(JournalState { trace: open_append(&args.trace_path)?, conversation: open_append(&args.conversation_path)?, failed_writes: 0 })
    }

    async fn handle(&self, _myself: ActorRef<JournalMsg>, msg: JournalMsg, state: &mut JournalState) -> Result<(), ActorProcessingErr> {
        match msg {
            JournalMsg::Trace(ev) => write_line(&mut state.trace, &ev, &mut state.failed_writes),
            JournalMsg::Record(m) => write_line(&mut state.conversation, &m, &mut state.failed_writes),
            JournalMsg::Flush(reply) => {
                for f in [&mut state.trace, &mut state.conversation] {
                    if f.sync_data().is_err() {
                        state.failed_writes += 1;
                    }
                }
                let _ = reply.send(state.failed_writes);
            }
        }
        Ok(())
    }
}
