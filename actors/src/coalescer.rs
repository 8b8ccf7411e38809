//! The coalescer actor: turns a driver's `tool-call-started` / `tool-call-input-bytes` reports
//! into `tool-call-started` and `tool-call-progress` frames (CONTRACT §10, seed 001).
//!
//! Rules, per task attempt:
//! - a start writes `tool-call-started` once; a start with an empty id, or for an id already
//!   being written or settled, writes nothing;
//! - progress for a call: the first report is written at once; later ones only when
//!   [`PROGRESS_INTERVAL`] has passed since the last frame written for that call, otherwise the
//!   largest is held; a report no larger than an earlier one is ignored;
//! - when the complete call arrives (the driver call returned), the largest unwritten size is
//!   written once, whatever the interval;
//! - when the driver call failed instead (a stream cut in the middle of a call's input), calls
//!   being written were never completed: nothing is flushed for them;
//! - a call's result settles it: anything held is dropped, later reports are ignored;
//! - a new attempt forgets everything.
//!
//! Time comes from `tokio::time::Instant`, so tests pause and advance it. Frames go to the
//! emitter by cast before any reply, so a flush is always ahead of whatever the caller emits
//! next (the `artifact` frame).

use capsule_protocol::frame::Frame;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::{HashMap, HashSet};
use std::time::Duration;
use tokio::time::Instant;

use crate::emitter::EmitterMsg;

/// The shortest time between two progress frames of one call (the flush is exempt).
pub const PROGRESS_INTERVAL: Duration = Duration::from_millis(250);

/// What the coalescer is told by a driver's sink: calls started and their progress, the end of
/// a call or of all of them, and a reset per task.
pub enum CoalescerMsg {
    /// A driver began writing a call.
    Started {
        /// Task id the frames belong to.
        task_id: String,
        /// Call id.
        id: String,
        /// Tool name.
        name: String,
    },
    /// Cumulative input bytes of a call.
    Progress {
        /// Task id.
        task_id: String,
        /// Call id.
        id: String,
        /// Bytes so far.
        bytes: u64,
    },
    /// The driver call returned: every call being written is complete; flush what is held,
    /// then answer.
    CompleteAll(RpcReplyPort<()>),
    /// The driver call failed: no call being written was completed (a stream cut in the middle
    /// of a call's input); forget them without a flush, then answer.
    AbandonAll(RpcReplyPort<()>),
    /// A call's result arrived.
    Settle {
        /// Call id.
        id: String,
    },
    /// A new task attempt starts.
    Reset,
}

#[derive(Debug)]
struct Writing {
    task_id: String,
    largest: u64,
    written: Option<(u64, Instant)>,
}

/// The rules as plain state, separate from the actor so they can be tested with any clock.
#[derive(Debug, Default)]
pub struct ProgressRules {
    writing: HashMap<String, Writing>,
    order: Vec<String>,
    settled: HashSet<String>,
}

impl ProgressRules {
    /// A start: whether to write `tool-call-started`.
    pub fn start(&mut self, task_id: &str, id: &str) -> bool {
        if id.is_empty() || self.writing.contains_key(id) || self.settled.contains(id) {
            return false;
        }
        self.writing.insert(id.to_string(), Writing { task_id: task_id.to_string(), largest: 0, written: None });
        self.order.push(id.to_string());
        true
    }

    /// A report: the size to write now, if any.
    pub fn report(&mut self, id: &str, bytes: u64, now: Instant) -> Option<u64> {
        let w = self.writing.get_mut(id)?;
        if bytes <= w.largest {
            return None;
        }
        w.largest = bytes;
        let due = match w.written {
            None => true,
            Some((_, at)) => now.saturating_duration_since(at) >= PROGRESS_INTERVAL,
        };
        if due {
            w.written = Some((bytes, now));
            Some(bytes)
        } else {
            None
        }
    }

    /// Every call being written is complete: `(task_id, id, size)` to flush, in start order.
    pub fn complete_all(&mut self) -> Vec<(String, String, u64)> {
        let mut out = Vec::new();
        for id in std::mem::take(&mut self.order) {
            if let Some(w) = self.writing.remove(&id) {
                let written = w.written.map(|(s, _)| s).unwrap_or(0);
                if w.largest > written {
                    out.push((w.task_id, id.clone(), w.largest));
                }
            }
            self.settled.insert(id);
        }
        out
    }

    /// The driver call failed: settle every call being written, dropping what is held (seed 001
    /// `clear_writing`: a call that never completed flushes nothing).
    pub fn abandon_all(&mut self) {
        for id in std::mem::take(&mut self.order) {
            self.writing.remove(&id);
            self.settled.insert(id);
        }
    }

    /// A result arrived: settle the call, dropping anything held.
    pub fn settle(&mut self, id: &str) {
        self.writing.remove(id);
        self.order.retain(|o| o != id);
        self.settled.insert(id.to_string());
    }

    /// A new attempt: forget everything.
    pub fn reset(&mut self) {
        *self = ProgressRules::default();
    }
}

/// The actor; its argument is the session's emitter.
pub struct Coalescer;

/// The coalescer's state: the progress rules for the open calls and the emitter it sends to.
pub struct CoalescerState {
    rules: ProgressRules,
    emitter: crate::peer::Peer,
}

impl CoalescerState {
    fn emit(&self, frame: Frame) {
        if let Err(e) = self.emitter.tell(EmitterMsg::Emit(frame)) {
            tracing::warn!(error = %e, "a progress frame was not emitted");
        }
    }
}

impl Actor for Coalescer {
    type Msg = CoalescerMsg;
    type State = CoalescerState;
    type Arguments = crate::peer::Peer;

    async fn pre_start(
        &self,
        _myself: ActorRef<CoalescerMsg>,
        emitter: crate::peer::Peer,
    ) -> Result<CoalescerState, ActorProcessingErr> {
        Ok(CoalescerState { rules: ProgressRules::default(), emitter })
    }

    async fn handle(
        &self,
        _myself: ActorRef<CoalescerMsg>,
        msg: CoalescerMsg,
        state: &mut CoalescerState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            CoalescerMsg::Started { task_id, id, name } => {
                if state.rules.start(&task_id, &id) {
                    state.emit(Frame::ToolCallStarted { id: task_id, tool_call_id: id, tool_name: name });
                }
            }
            CoalescerMsg::Progress { task_id, id, bytes } => {
                if let Some(size) = state.rules.report(&id, bytes, Instant::now()) {
                    state.emit(Frame::ToolCallProgress { id: task_id, tool_call_id: id, input_bytes: size });
                }
            }
            CoalescerMsg::CompleteAll(reply) => {
                for (task_id, id, size) in state.rules.complete_all() {
                    state.emit(Frame::ToolCallProgress { id: task_id, tool_call_id: id, input_bytes: size });
                }
                let _ = reply.send(());
            }
            CoalescerMsg::AbandonAll(reply) => {
                state.rules.abandon_all();
                let _ = reply.send(());
            }
            CoalescerMsg::Settle { id } => state.rules.settle(&id),
            CoalescerMsg::Reset => state.rules.reset(),
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn progress_is_written_at_once_then_at_most_once_per_interval_and_flushed_on_complete() {
        let mut r = ProgressRules::default();
        assert!(r.start("t", "c1"));
        let t0 = Instant::now();
        assert_eq!(r.report("c1", 10, t0), Some(10), "first report is written at once");
        assert_eq!(r.report("c1", 20, t0 + Duration::from_millis(100)), None, "held inside the interval");
        assert_eq!(r.report("c1", 15, t0 + Duration::from_millis(300)), None, "a regression is ignored");
        assert_eq!(r.report("c1", 30, t0 + Duration::from_millis(250)), Some(30), "due after 250 ms");
        assert_eq!(r.report("c1", 40, t0 + Duration::from_millis(260)), None);
        assert_eq!(r.complete_all(), vec![("t".to_string(), "c1".to_string(), 40)]);
        assert_eq!(r.report("c1", 50, t0 + Duration::from_secs(5)), None, "settled calls take no reports");
        assert!(!r.start("t", "c1"), "a settled id does not start again");
    }

    #[test]
    fn the_documented_interval_is_the_one_the_code_uses() {
        let doc = include_str!("../../docs/protocol.md");
        let ms = PROGRESS_INTERVAL.as_millis();
        assert!(doc.contains(&format!("per call per **{ms} ms**")), "docs/protocol.md must state the {ms} ms interval");
        assert!(
            doc.contains(&format!("only when {ms} ms have passed")),
            "docs/protocol.md must state the {ms} ms rule"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_empty_id_or_duplicate_start_writes_nothing_and_a_result_drops_what_is_held() {
        let mut r = ProgressRules::default();
        assert!(!r.start("t", ""));
        assert!(r.start("t", "a"));
        assert!(!r.start("t", "a"));
        let t0 = Instant::now();
        assert_eq!(r.report("a", 5, t0), Some(5));
        assert_eq!(r.report("a", 9, t0), None);
        r.settle("a");
        assert!(r.complete_all().is_empty(), "the held 9 was dropped by the result");
        r.reset();
        assert!(r.start("t", "a"), "a new attempt forgets settled ids");
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_cut_off_in_the_middle_of_its_input_flushes_nothing() {
        let mut r = ProgressRules::default();
        assert!(r.start("t", "cut"));
        let t0 = Instant::now();
        assert_eq!(r.report("cut", 5, t0), Some(5));
        assert_eq!(r.report("cut", 900, t0 + Duration::from_millis(10)), None, "held");
        r.abandon_all();
        assert!(r.complete_all().is_empty(), "the held 900 is never written");
        assert_eq!(r.report("cut", 1000, t0 + Duration::from_secs(5)), None, "and later reports are ignored");
    }
}
