//! The bridge from a guest's live events to the actors: text and thinking chunks go to the
//! emitter, tool-call reports to the coalescer. Every call is a cast, so a guest's event
//! returns at once and never fails (CONTRACT §2).

use capsule_protocol::frame::Frame;
use capsule_runtime::GuestEvents;
use ractor::ActorRef;

use crate::coalescer::CoalescerMsg;
use crate::emitter::EmitterMsg;

/// Forwards a driver's events for one task.
pub struct DriverSink {
    /// The task the frames belong to.
    pub task_id: String,
    /// The emitter.
    pub emitter: Option<ActorRef<EmitterMsg>>,
    /// The coalescer.
    pub coalescer: Option<ActorRef<CoalescerMsg>>,
}

impl GuestEvents for DriverSink {
    fn chunk(&self, text: String) {
        if let Some(e) = &self.emitter {
            let _ = e.cast(EmitterMsg::Emit(Frame::Text { id: self.task_id.clone(), text, is_final: false }));
        }
    }

    fn thinking(&self, text: String) {
        if let Some(e) = &self.emitter {
            let _ = e.cast(EmitterMsg::Emit(Frame::Thinking { id: self.task_id.clone(), text, is_final: false }));
        }
    }

    fn tool_call_started(&self, id: String, name: String) {
        if let Some(c) = &self.coalescer {
            let _ = c.cast(CoalescerMsg::Started { task_id: self.task_id.clone(), id, name });
        }
    }

    fn tool_call_input_bytes(&self, id: String, bytes: u64) {
        if let Some(c) = &self.coalescer {
            let _ = c.cast(CoalescerMsg::Progress { task_id: self.task_id.clone(), id, bytes });
        }
    }
}
