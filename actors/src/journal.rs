//! The journal actor: owns the session's `trace.jsonl` and `conversation.jsonl`.
//!
//! Each line is written whole with one `write` call (no user-space buffer; a step's lines of
//! one file share one call), in the order messages arrive, so a line is with the OS as soon as
//! its write returns and survives the process being killed. `Append` answers after its lines are written, so the loop acts on a
//! step (runs a tool, calls a provider) only after the step is journaled; `Flush` answers
//! after `sync_data`, for the end of a task. A failed write is logged and counted, never
//! dropped silently.

use crate::journal_check::SealedFile;
use crate::journal_log::{JournalLog, LogError};
use capsule_protocol::trace::{TraceEvent, TraceKind};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::value::RawValue;
use std::path::PathBuf;

/// What the journal is asked: the loop's awaited appends (write before act), fire-and-forget
/// trace lines, and the flush at the end of a task.
pub enum JournalMsg {
    /// Append a trace event.
    Trace(TraceEvent),
    /// Make everything sent so far durable, then answer with the count of failed writes.
    Flush(RpcReplyPort<u64>),
    /// Write these trace events and messages, then answer: the caller acts only after its
    /// journal lines are written (handed to the OS, so they survive the process being killed),
    /// and not at all when a write failed.
    Append {
        /// Trace events, in order.
        events: Vec<TraceEvent>,
        /// Conversation messages, in order, each already serialized (the JSON the loop's
        /// context keeps for it, so a message is serialized once).
        messages: Vec<Box<RawValue>>,
        /// Answered after the writes: the first failed write, if any.
        reply: RpcReplyPort<Result<(), WriteFailed>>,
    },
    /// The context was compacted: write the marker line [`CONTEXT_REPLACED`] and then the new
    /// context's messages to the conversation record (a restarted or resumed loop rebuilds its
    /// context from the last marker on), then the trace events; answered like `Append`.
    Replace {
        /// Trace events, in order.
        events: Vec<TraceEvent>,
        /// The whole new context, each message serialized.
        messages: Vec<Box<RawValue>>,
        /// Answered after the writes.
        reply: RpcReplyPort<Result<(), WriteFailed>>,
    },
    /// Test hook: the next `Append` carrying a trace line of this kind fails, as a full disk
    /// or a lost JetStream would fail it, and writes nothing.
    InjectFailure(TraceKind),
}

/// The key of the conversation-record line that says "the context is replaced by the messages
/// after this line".
pub const CONTEXT_REPLACED: &str = "context_replaced";

/// A journal line that could not be written.
#[derive(Debug, thiserror::Error)]
#[error("cannot append to {}", file.display())]
pub struct WriteFailed {
    /// The file.
    pub file: PathBuf,
    /// Why.
    #[source]
    pub source: LogError,
}

/// Where the records go.
#[derive(Debug, Clone)]
pub struct JournalArgs {
    /// `trace.jsonl`.
    pub trace_path: PathBuf,
    /// `conversation.jsonl`.
    pub conversation_path: PathBuf,
    /// In a cluster: the records are JetStream subjects instead of these files.
    pub cluster: Option<ClusterJournal>,
}

/// A clustered session's records on JetStream, and the last entry this host wrote to each
/// (kept across restarts of the journal, so a restart after another host wrote is fenced).
#[derive(Debug, Clone)]
pub struct ClusterJournal {
    /// JetStream.
    pub js: async_nats::jetstream::Context,
    /// The session.
    pub session: String,
    /// Last trace entry written, `u64::MAX` before the first open.
    pub trace_last: std::sync::Arc<std::sync::atomic::AtomicU64>,
    /// Last conversation entry written, likewise.
    pub conversation_last: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

async fn open_stream(
    c: &ClusterJournal,
    record: crate::cluster::Record,
    last: &std::sync::atomic::AtomicU64,
) -> Result<crate::cluster::StreamLog, crate::cluster::ClusterError> {
    use std::sync::atomic::Ordering;
    let log = match last.load(Ordering::Acquire) {
        u64::MAX => crate::cluster::StreamLog::open(&c.js, &c.session, record).await?.0,
        expected => crate::cluster::StreamLog::reopen(&c.js, &c.session, record, expected).await?,
    };
    last.store(log.last(), Ordering::Release);
    Ok(log)
}

/// State: the open records.
pub struct JournalState {
    trace: Box<dyn JournalLog>,
    conversation: Box<dyn JournalLog>,
    paths: JournalArgs,
    failed_writes: u64,
    /// The test hook's armed failure.
    fail_next: Option<TraceKind>,
}

/// The journal actor: the only writer of `trace.jsonl` and `conversation.jsonl`.
pub struct Journal;

/// Open a journal file for appending: `0600`, never through a symlink, and only a regular
/// file this user owns; each line numbered and sealed.
fn open_append(p: &std::path::Path) -> Result<SealedFile, capsule_runtime::BeneathError> {
    SealedFile::open(p)
}

async fn write_line(f: &mut dyn JournalLog, value: &impl serde::Serialize, failed: &mut u64) -> Result<(), LogError> {
    let written = match serde_json::to_vec(value) {
        Ok(line) => f.append(line).await,
        Err(e) => Err(LogError::Io(std::io::Error::other(e))),
    };
    count_failure(written, failed)
}

/// Write the lines of one step to `f` (one entry on JetStream): the first failure, logged, and
/// how many lines were not written.
async fn append_all(f: &mut dyn JournalLog, lines: Vec<Vec<u8>>) -> (Result<(), LogError>, u64) {
    let (written, failed) = f.append_all(lines).await;
    if let Err(e) = &written {
        tracing::error!(error = %e, "journal write failed");
    }
    (written, failed)
}

fn count_failure(written: Result<(), LogError>, failed: &mut u64) -> Result<(), LogError> {
    if let Err(e) = &written {
        tracing::error!(error = %e, "journal write failed");
        *failed += 1;
    }
    written
}

impl Actor for Journal {
    type Msg = JournalMsg;
    type State = JournalState;
    type Arguments = JournalArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<JournalMsg>,
        args: JournalArgs,
    ) -> Result<JournalState, ActorProcessingErr> {
        let (trace, conversation): (Box<dyn JournalLog>, Box<dyn JournalLog>) = match &args.cluster {
            None => (Box::new(open_append(&args.trace_path)?), Box::new(open_append(&args.conversation_path)?)),
            Some(c) => (
                Box::new(open_stream(c, crate::cluster::Record::Trace, &c.trace_last).await?),
                Box::new(open_stream(c, crate::cluster::Record::Conversation, &c.conversation_last).await?),
            ),
        };
        Ok(JournalState { trace, conversation, paths: args, failed_writes: 0, fail_next: None })
    }

    async fn handle(
        &self,
        _myself: ActorRef<JournalMsg>,
        msg: JournalMsg,
        state: &mut JournalState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            JournalMsg::Trace(ev) => {
                let written = state.trace.append(ev.into_line()).await;
                let _ = count_failure(written, &mut state.failed_writes);
            }
            JournalMsg::Append { events, messages, reply } => {
                if let Some(kind) = state.fail_next.filter(|k| events.iter().any(|e| e.kind() == *k)) {
                    state.fail_next = None;
                    state.failed_writes += 1;
                    let source = LogError::Io(std::io::Error::other(format!("injected failure of a {kind:?} step")));
                    let _ = reply.send(Err(WriteFailed { file: state.paths.trace_path.clone(), source }));
                    return Ok(());
                }
                let _ = reply.send(append(state, None, messages, events).await);
            }
            JournalMsg::InjectFailure(kind) => state.fail_next = Some(kind),
            JournalMsg::Replace { events, messages, reply } => {
                let marker = serde_json::json!({CONTEXT_REPLACED: {"messages": messages.len()}});
                let _ = reply.send(append(state, Some(marker), messages, events).await);
            }
            JournalMsg::Flush(reply) => {
                state.remember();
                for f in [&mut state.trace, &mut state.conversation] {
                    if f.sync().await.is_err() {
                        state.failed_writes += 1;
                    }
                }
                let _ = reply.send(state.failed_writes);
            }
        }
        state.remember();
        Ok(())
    }
}

impl JournalState {
    /// Keep the last JetStream entry of each record in the arguments (a clustered session).
    fn remember(&self) {
        if let Some(c) = &self.paths.cluster {
            use std::sync::atomic::Ordering;
            c.trace_last.store(self.trace.position(), Ordering::Release);
            c.conversation_last.store(self.conversation.position(), Ordering::Release);
        }
    }
}

/// Write an optional marker line and `messages` to the conversation record, and `events` to
/// the trace: the first failed write, if any (the conversation's first).
///
/// After the marker, the two records are written at once, each record's lines of the step in
/// one append (one JetStream entry, a batch when there are several; one `write` of a file), and
/// a conversation line does not wait for a trace line's acknowledgement: a step costs one round
/// trip to JetStream, however many lines it has. The conversation's entry is sent first, so on
/// one connection it reaches the stream first. A file journal's writes are immediate and keep
/// this order.
async fn append(
    state: &mut JournalState,
    marker: Option<serde_json::Value>,
    messages: Vec<Box<RawValue>>,
    events: Vec<TraceEvent>,
) -> Result<(), WriteFailed> {
    // A replaced context's marker comes first; if it is not written, nothing else is.
    if let Some(m) = marker
        && let Err(source) = write_line(state.conversation.as_mut(), &m, &mut state.failed_writes).await
    {
        return Err(WriteFailed { file: state.paths.conversation_path.clone(), source });
    }
    // Each line moves into its write: a message's text and an event's line, both serialized
    // once where they were made.
    let lines = messages.into_iter().map(|m| String::from(Box::<str>::from(m)).into_bytes()).collect();
    let conversation = append_all(state.conversation.as_mut(), lines);
    let trace = append_all(state.trace.as_mut(), events.into_iter().map(TraceEvent::into_line).collect());
    let ((conversation, conversation_failed), (trace, trace_failed)) = futures::future::join(conversation, trace).await;
    state.failed_writes += conversation_failed + trace_failed;
    let paths = &state.paths;
    conversation
        .map_err(|source| WriteFailed { file: paths.conversation_path.clone(), source })
        .and(trace.map_err(|source| WriteFailed { file: paths.trace_path.clone(), source }))
}
