//! A step whose journal write the loop does not wait for, because the only thing that follows
//! it is a provider call that cannot send before the write is acknowledged.
//!
//! What it is for: a turn's last tool result is journaled, then the next call's request is built
//! and the driver turns it into the provider's request (a few hundred microseconds, growing with
//! the history). Waiting for the write first put the journal's round trip (about 0.5 ms on a
//! JetStream R3 cluster) in front of all of that. Here the two overlap: the result enters the
//! context at once, and the call goes ahead behind a [`SendGate`] that opens only when the write
//! is acknowledged.
//!
//! What still holds (write before act):
//! - no byte of the provider call leaves the host before the write is acknowledged (the gate);
//! - the frames the loop emits meanwhile (the result's `artifact`, the next turn's `status`) are
//!   held and reach the emitter only after the acknowledgement, so a client never sees a step
//!   the journal may not have. The gate opens only once every frame the loop emitted before it
//!   started the call has reached the emitter (the loop marks that moment in the same channel),
//!   so the call's own frames come after them by construction, not by timing;
//! - anything else that would act (a hook, compaction, another journal write, the task's end,
//!   the call's answer) first [`settle`](LoopState::settle)s the step: waits for the
//!   acknowledgement, and on a failed write takes the message back out of the context and fails
//!   the task, as an awaited write would have.

use capsule_protocol::frame::Frame;
use capsule_protocol::neutral::Message;
use capsule_protocol::trace::TraceEvent;
use capsule_runtime::{GateOpener, SendGate};
use tokio::sync::mpsc::UnboundedSender;

use super::LoopState;
use crate::emitter::EmitterMsg;
use crate::error::JournalError;
use crate::journal::JournalMsg;
use crate::names::role;
use crate::peer::PeerError;

/// A journaled step not yet acknowledged.
pub(crate) struct Unacked {
    /// The context's length before the step's message.
    context_len: usize,
    /// Opens when the write is acknowledged.
    gate: SendGate,
    /// Frames the loop emits meanwhile, forwarded in order after the acknowledgement, and the
    /// mark of the call that waits behind the step.
    held: UnboundedSender<Held>,
    /// The write's outcome, once acknowledged and the held frames forwarded.
    written: tokio::task::JoinHandle<Result<(), JournalError>>,
}

/// What goes through the hold: a frame, or the mark that the call behind the step was started
/// (the gate opens when the forwarding reaches it).
enum Held {
    Frame(Frame),
    CallStarted,
}

impl LoopState {
    /// As [`record_with`](LoopState::record_with), without waiting for the write: `m` enters
    /// the context now and the step stays unacknowledged until [`settle`](LoopState::settle)d.
    /// Only a gated provider call may act on it meanwhile.
    pub(crate) async fn record_unacked(&mut self, m: Message, events: Vec<TraceEvent>) -> Result<(), JournalError> {
        self.settle().await?;
        let json = serde_json::value::to_raw_value(&m).map_err(JournalError::Serialize)?;
        let (port, answer) = tokio::sync::oneshot::channel();
        // Sent from here, not from the waiting task: the loop's later journal messages stay
        // behind it in the journal's mailbox.
        let append = JournalMsg::Append { events, messages: vec![json.clone()], reply: port.into() };
        self.peer(role::JOURNAL).tell(append)?;
        let wait = self.journal_wait();
        let (opener, gate) = capsule_runtime::send_gate();
        let (hold, mut held) = tokio::sync::mpsc::unbounded_channel::<Held>();
        let emitter = self.peer(role::EMITTER);
        let emit = move |frame| {
            if let Err(e) = emitter.tell(EmitterMsg::Emit(frame)) {
                tracing::warn!(error = %e, "a frame was not emitted");
            }
        };
        let written = tokio::spawn(async move {
            let acked = match tokio::time::timeout(wait, answer).await {
                Ok(Ok(written)) => written.map_err(JournalError::from),
                Ok(Err(_dropped)) => Err(PeerError::Dropped { role: role::JOURNAL }.into()),
                Err(_elapsed) => Err(PeerError::Timeout { role: role::JOURNAL, after: wait }.into()),
            };
            if acked.is_err() {
                // The step did not happen: its frames are never shown, and the call never sends.
                opener.refuse();
                return acked;
            }
            // In the loop's order: the frames emitted before the call started, then the gate, then
            // whatever the loop emits until it settles.
            let mut opener = Some(opener);
            while let Some(item) = held.recv().await {
                match item {
                    Held::Frame(frame) => emit(frame),
                    Held::CallStarted => opener.take().into_iter().for_each(GateOpener::open),
                }
            }
            // Settled without a call (compaction, the task's end): the step is written all the same.
            opener.into_iter().for_each(GateOpener::open);
            acked
        });
        let context_len = self.conversation.len();
        self.conversation.push_serialized(m, json);
        self.unacked = Some(Unacked { context_len, gate, held: hold, written });
        Ok(())
    }

    /// Wait for the unacknowledged step, if any. A failed write takes its message back out of
    /// the context and is returned: the caller must not act, as after a failed awaited write.
    pub(crate) async fn settle(&mut self) -> Result<(), JournalError> {
        let Some(Unacked { context_len, gate: _, held, written }) = self.unacked.take() else { return Ok(()) };
        // Closing the channel ends the forwarding once the held frames are out.
        drop(held);
        let result = written.await.unwrap_or_else(|_| Err(PeerError::Dropped { role: role::JOURNAL }.into()));
        if result.is_err() {
            self.conversation.truncate(context_len);
        }
        result
    }

    /// A frame the loop emits while a step is unacknowledged is held until it is; `None` when
    /// no step is.
    pub(crate) fn hold_frame(&self, frame: Frame) -> Option<Frame> {
        match &self.unacked {
            Some(u) => {
                // A refused step's frames are dropped with it.
                let _ = u.held.send(Held::Frame(frame));
                None
            }
            None => Some(frame),
        }
    }

    /// The gate for a call started now, behind the unacknowledged step (`None`: no step is):
    /// it opens once the frames emitted so far have reached the emitter.
    pub(crate) fn gate_for_call(&self) -> Option<SendGate> {
        let u = self.unacked.as_ref()?;
        let _ = u.held.send(Held::CallStarted);
        Some(u.gate.clone())
    }
}
