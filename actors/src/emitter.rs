//! The stream emitter actor: gives every frame its session-wide id, keeps the replay ring and
//! fans frames out to subscribers.
//!
//! Guarantees: ids start at 1 and strictly increase; frames reach every subscriber in id
//! order; a subscriber that falls behind its bounded queue loses frames and is told how many
//! with one `lagged` frame as soon as it has room again, so a slow reader never stalls the
//! emitter or the other readers. A subscription asking for frames after id N first gets the
//! ring's frames after N, preceded by `gap` when some were already evicted.

use capsule_protocol::frame::{Frame, NumberedFrame, Published, SharedFrame};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// Frames kept for replay.
pub const REPLAY_RING: usize = 512;
/// Frames queued per subscriber before it lags.
pub const SUBSCRIBER_QUEUE: usize = 128;

/// What the emitter is asked: emit a frame, add a subscriber (with replay), the last id, and
/// close every stream at the end.
pub enum EmitterMsg {
    /// Number and publish a frame.
    Emit(Frame),
    /// Subscribe; `after` is a `Last-Event-ID`.
    Subscribe {
        /// Replay frames after this id.
        after: Option<u64>,
        /// The receiving end.
        reply: RpcReplyPort<mpsc::Receiver<SharedFrame>>,
    },
    /// The last id assigned.
    LastId(RpcReplyPort<u64>),
    /// The session is ending: send `capsule-closed` to every subscriber and end their streams.
    Close(RpcReplyPort<()>),
    /// A clustered session's frame, now acknowledged by JetStream (when it has an id): kept
    /// for replay and sent. Sent by the frames writer, in order.
    Stored(SharedFrame),
    /// A clustered session's `Close`, after every frame before it was stored.
    Closed(RpcReplyPort<()>),
    /// Sent by the emitter to itself with the first frame of a burst: append the frames
    /// numbered since, in one write, then send them.
    Flush,
}

struct Subscriber {
    tx: mpsc::Sender<SharedFrame>,
    missed: u64,
}

/// What the emitter is started (and restarted, or resumed) with.
#[derive(Clone)]
pub struct EmitterArgs {
    /// The next id; shared with the supervisor so a restarted emitter continues the sequence.
    pub next_id: Arc<AtomicU64>,
    /// `frames.jsonl`: every id-bearing frame is appended before it is sent; on start the file's
    /// frames refill the replay ring and the ids continue after its last.
    pub frames_path: Option<std::path::PathBuf>,
    /// In a cluster: the frames go to the session's JetStream subject instead (JetStream and
    /// the session id); each is sent to subscribers only once acknowledged, so a watcher never
    /// sees a frame a later owner could number again.
    pub cluster: Option<(async_nats::jetstream::Context, String)>,
}

/// The emitter's state: `frames.jsonl`, the id counter, the replay ring and the subscribers.
pub struct EmitterState {
    frames: Option<crate::journal_check::SealedFile>,
    /// A clustered session's frame writer (appends in order, then sends `Stored`).
    stored: Option<mpsc::UnboundedSender<crate::cluster::frames::Pending>>,
    /// The next id; shared with the supervisor so a restarted emitter continues the sequence.
    next_id: Arc<AtomicU64>,
    ring: VecDeque<SharedFrame>,
    subscribers: Vec<Subscriber>,
    /// Frames numbered and not yet appended to `frames.jsonl` (nor sent): the burst a `Flush`
    /// the emitter sent itself will write.
    pending: Vec<SharedFrame>,
}

/// The actor. Its argument is the next id to assign (starting at 1 for a new session); the
/// supervisor keeps the same counter across restarts, so ids never repeat.
pub struct Emitter;

impl Subscriber {
    /// Deliver, or count as missed; false when the subscriber is gone.
    fn offer(&mut self, f: &SharedFrame) -> bool {
        if self.missed > 0 {
            match self.tx.try_send(Published::unnumbered(Frame::Lagged { missed: self.missed })) {
                Ok(()) => self.missed = 0,
                Err(mpsc::error::TrySendError::Full(_)) => {
                    self.missed += 1;
                    return true;
                }
                Err(mpsc::error::TrySendError::Closed(_)) => return false,
            }
        }
        match self.tx.try_send(f.clone()) {
            Ok(()) => true,
            Err(mpsc::error::TrySendError::Full(_)) => {
                self.missed += 1;
                true
            }
            Err(mpsc::error::TrySendError::Closed(_)) => false,
        }
    }
}

impl EmitterState {
    /// Append the pending frames to `frames.jsonl` in one write, then keep and send them.
    fn flush(&mut self) {
        if self.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut self.pending);
        if let Some(f) = self.frames.as_mut() {
            let lines = pending.iter().filter(|f| f.id.is_some()).map(|f| f.json_line().into_bytes()).collect();
            if let Err(e) = f.append_many(lines) {
                tracing::error!(error = %e, frames = pending.len(), "cannot append to frames.jsonl");
            }
        }
        for f in pending {
            self.publish(f);
        }
    }

    /// Keep a numbered frame for replay, and send it to every subscriber.
    fn publish(&mut self, numbered: SharedFrame) {
        if numbered.id.is_some() {
            if self.ring.len() == REPLAY_RING {
                self.ring.pop_front();
            }
            self.ring.push_back(numbered.clone());
        }
        self.subscribers.retain_mut(|s| s.offer(&numbered));
    }

    /// Send `capsule-closed` to every subscriber and end their streams.
    fn close(&mut self, reply: RpcReplyPort<()>) {
        let closed = Published::unnumbered(Frame::CapsuleClosed {});
        for s in &mut self.subscribers {
            let _ = s.tx.try_send(closed.clone());
        }
        self.subscribers.clear();
        let _ = reply.send(());
    }
}

impl Actor for Emitter {
    type Msg = EmitterMsg;
    type State = EmitterState;
    type Arguments = EmitterArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<EmitterMsg>,
        args: EmitterArgs,
    ) -> Result<EmitterState, ActorProcessingErr> {
        let next_id = args.next_id;
        // Grown as frames come (up to REPLAY_RING), not reserved up front: an idle capsule holds
        // no room for 512 frames it has not sent.
        let mut ring = VecDeque::new();
        let (mut frames, mut stored) = (None, None);
        let mut refill = |list: Vec<NumberedFrame>| {
            for f in list {
                if ring.len() == REPLAY_RING {
                    ring.pop_front();
                }
                if let Some(id) = f.id {
                    next_id.fetch_max(id + 1, Ordering::SeqCst);
                }
                ring.push_back(Published::new(f));
            }
        };
        if let Some((js, session)) = &args.cluster {
            let (log, entries) = crate::cluster::StreamLog::open(js, session, crate::cluster::Record::Frames).await?;
            refill(entries.iter().filter_map(|l| parse_frame(l)).collect());
            stored = Some(crate::cluster::frames::writer(log, myself));
        } else if let Some(path) = &args.frames_path {
            refill(read_frames(path));
            frames = Some(crate::journal_check::SealedFile::open(path)?);
        }
        if next_id.load(Ordering::SeqCst) == 0 {
            next_id.store(1, Ordering::SeqCst);
        }
        Ok(EmitterState { frames, stored, next_id, ring, subscribers: Vec::new(), pending: Vec::new() })
    }

    async fn handle(
        &self,
        myself: ActorRef<EmitterMsg>,
        msg: EmitterMsg,
        state: &mut EmitterState,
    ) -> Result<(), ActorProcessingErr> {
        // Whatever else is asked sees every frame numbered before it already written and sent.
        if !matches!(msg, EmitterMsg::Emit(_) | EmitterMsg::Flush) {
            state.flush();
        }
        match msg {
            EmitterMsg::Emit(frame) => {
                let id = frame.is_id_bearing().then(|| state.next_id.fetch_add(1, Ordering::SeqCst));
                let numbered = Published::new(NumberedFrame { id, frame });
                if let Some(writer) = &state.stored {
                    // Every frame goes through the writer, so they stay in order; one with an
                    // id comes back as `Stored` once JetStream acknowledged it.
                    if writer.send(crate::cluster::frames::Pending::Frame(numbered)).is_err() {
                        tracing::error!("the frames writer stopped; a frame was not stored");
                    }
                    return Ok(());
                }
                // A burst's frames (a driver's deltas, the coalescer's flush, a step's frames)
                // are in the mailbox together: they are appended in one write at the `Flush`
                // queued behind them, and sent after it. A frame after a pending one waits too,
                // so the order holds.
                if (id.is_some() && state.frames.is_some()) || !state.pending.is_empty() {
                    if state.pending.is_empty() && myself.cast(EmitterMsg::Flush).is_err() {
                        tracing::error!("the emitter cannot send itself a flush");
                    }
                    state.pending.push(numbered);
                } else {
                    state.publish(numbered);
                }
            }
            EmitterMsg::Flush => {
                // The session's own work first: a burst is emitted in the middle of a turn, and
                // on the session's one worker this task, woken there, would run next, ahead of
                // the journal's step, the tool's wake-up and the next request. Yielding once puts
                // the write and the sending behind them (into the tool's run or the provider's
                // wait). The order of frames does not change: anything asked meanwhile queues
                // behind this flush in the mailbox.
                tokio::task::yield_now().await;
                state.flush()
            }
            EmitterMsg::Stored(numbered) => state.publish(numbered),
            EmitterMsg::Subscribe { after, reply } => {
                let replay: Vec<SharedFrame> = match after {
                    None => Vec::new(),
                    Some(after) => {
                        let mut out = Vec::new();
                        let first =
                            state.ring.front().and_then(|f| f.id).unwrap_or(state.next_id.load(Ordering::SeqCst));
                        // Checked: a Last-Event-ID of u64::MAX is after every frame, not before the first.
                        if after.checked_add(1).is_some_and(|next| next < first) {
                            out.push(Published::unnumbered(Frame::Gap { first_available_id: first }));
                        }
                        out.extend(state.ring.iter().filter(|f| f.id.is_some_and(|id| id > after)).cloned());
                        out
                    }
                };
                let (tx, rx) = mpsc::channel(SUBSCRIBER_QUEUE.max(replay.len() + 1));
                let mut sub = Subscriber { tx, missed: 0 };
                for f in &replay {
                    sub.offer(f);
                }
                state.subscribers.push(sub);
                let _ = reply.send(rx);
            }
            EmitterMsg::Close(reply) => match &state.stored {
                Some(writer) => {
                    if let Err(mpsc::error::SendError(crate::cluster::frames::Pending::Close(reply))) =
                        writer.send(crate::cluster::frames::Pending::Close(reply))
                    {
                        state.close(reply);
                    }
                }
                None => state.close(reply),
            },
            EmitterMsg::Closed(reply) => state.close(reply),
            EmitterMsg::LastId(reply) => {
                let _ = reply.send(state.next_id.load(Ordering::SeqCst) - 1);
            }
        }
        Ok(())
    }

    /// A burst still pending when the emitter stops is written (its `Flush` never comes).
    async fn post_stop(
        &self,
        _myself: ActorRef<EmitterMsg>,
        state: &mut EmitterState,
    ) -> Result<(), ActorProcessingErr> {
        state.flush();
        Ok(())
    }
}

/// The verified records of a journal file (its valid prefix; see
/// [`capsule_protocol::journal_line`]); empty when it cannot be read. `--resume` checks the
/// files first and refuses damage, so in a running session this is the whole file.
pub fn journal_records(path: &std::path::Path) -> Vec<Vec<u8>> {
    let Ok(mut f) = capsule_runtime::Beneath::file_at(path, capsule_runtime::FileMode::Read) else { return Vec::new() };
    let mut bytes = Vec::new();
    if std::io::Read::read_to_end(&mut f, &mut bytes).is_err() {
        return Vec::new();
    }
    capsule_protocol::journal_line::scan(&bytes).records
}

/// The frames of a `frames.jsonl` (its verified lines).
pub fn read_frames(path: &std::path::Path) -> Vec<NumberedFrame> {
    journal_records(path).iter().filter_map(|l| parse_frame(l)).collect()
}

/// One journaled frame line (`{"id", "event", "data"}`), or `None` when it is not one.
pub fn parse_frame(line: &[u8]) -> Option<NumberedFrame> {
    let v: serde_json::Value = serde_json::from_slice(line).ok()?;
    let frame: Frame = serde_json::from_value(serde_json::json!({"event": v["event"], "data": v["data"]})).ok()?;
    Some(NumberedFrame { id: v["id"].as_u64(), frame })
}

#[cfg(test)]
mod tests {
    use super::*;
    use ractor::Actor;

    /// An emitter of a local session with no frames file, ids from 1.
    async fn local_emitter() -> ActorRef<EmitterMsg> {
        let args = EmitterArgs { next_id: Arc::new(AtomicU64::new(1)), frames_path: None, cluster: None };
        Actor::spawn(None, Emitter, args).await.expect("emitter").0
    }

    #[tokio::test]
    async fn a_subscriber_that_does_not_read_loses_frames_and_is_told_how_many() {
        let e = local_emitter().await;
        let mut slow =
            e.call(|reply| EmitterMsg::Subscribe { after: None, reply }, None).await.expect("call").expect("rx");
        for i in 0..1000 {
            let _ = e.cast(EmitterMsg::Emit(Frame::Text { id: "t".into(), text: format!("{i}"), is_final: false }));
        }
        let last = e.call(EmitterMsg::LastId, None).await.expect("call").expect("id");
        assert_eq!(last, 1000, "the emitter numbered every frame without waiting for the reader");
        let mut got = Vec::new();
        while let Ok(f) = slow.try_recv() {
            got.push(f.id);
        }
        assert_eq!(
            got,
            (1..=SUBSCRIBER_QUEUE as u64).map(Some).collect::<Vec<_>>(),
            "the queue holds the first frames that fit"
        );
        // Room again: the next frame is preceded by one `lagged` with the count.
        let _ = e.cast(EmitterMsg::Emit(Frame::Text { id: "t".into(), text: "after".into(), is_final: false }));
        let lagged = slow.recv().await.expect("lagged");
        assert_eq!(lagged.frame, Frame::Lagged { missed: 1000 - SUBSCRIBER_QUEUE as u64 });
        assert_eq!(lagged.id, None);
        assert_eq!(slow.recv().await.expect("next").id, Some(1001));
    }

    fn text(i: u32) -> EmitterMsg {
        EmitterMsg::Emit(Frame::Text { id: "t".into(), text: format!("{i}"), is_final: false })
    }

    #[tokio::test]
    async fn a_burst_is_in_frames_jsonl_before_it_is_sent_and_a_subscriber_mid_burst_gets_each_frame_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("frames.jsonl");
        let args = EmitterArgs { next_id: Arc::new(AtomicU64::new(1)), frames_path: Some(path.clone()), cluster: None };
        let e = Actor::spawn(None, Emitter, args).await.expect("emitter").0;
        let mut early =
            e.call(|reply| EmitterMsg::Subscribe { after: None, reply }, None).await.expect("call").expect("rx");
        // One burst: five frames, then a subscription after id 3, all in the mailbox before the
        // emitter runs (this test's runtime has one thread), so before the burst's own flush.
        for i in 1..=5 {
            e.cast(text(i)).expect("cast");
        }
        let mut late =
            e.call(|reply| EmitterMsg::Subscribe { after: Some(3), reply }, None).await.expect("call").expect("rx");
        for want in 1..=5u64 {
            let got = early.recv().await.expect("frame");
            assert_eq!(got.id, Some(want));
            let written: Vec<u64> = read_frames(&path).iter().filter_map(|f| f.id).collect();
            assert!(written.contains(&want), "frame {want} was sent before it was in frames.jsonl: {written:?}");
        }
        e.cast(text(6)).expect("cast");
        let mut seen = Vec::new();
        while seen.last() != Some(&Some(6)) {
            seen.push(late.recv().await.expect("frame").id);
        }
        assert_eq!(seen, [Some(4), Some(5), Some(6)], "replayed after 3, then live, each once");
        let written: Vec<u64> = read_frames(&path).iter().filter_map(|f| f.id).collect();
        assert_eq!(written, [1, 2, 3, 4, 5, 6]);
    }

    #[tokio::test]
    async fn a_last_event_id_at_the_top_of_the_range_gets_no_spurious_gap() {
        let e = local_emitter().await;
        for i in 0..3 {
            let _ = e.cast(EmitterMsg::Emit(Frame::Text { id: "t".into(), text: format!("{i}"), is_final: false }));
        }
        for after in [u64::MAX, u64::MAX - 1, 3] {
            let mut rx = e
                .call(|reply| EmitterMsg::Subscribe { after: Some(after), reply }, None)
                .await
                .expect("call")
                .expect("rx");
            assert!(rx.try_recv().is_err(), "Last-Event-ID {after}: nothing to replay, and no gap");
        }
        let mut rx =
            e.call(|reply| EmitterMsg::Subscribe { after: Some(1), reply }, None).await.expect("call").expect("rx");
        assert_eq!(rx.try_recv().expect("replay").id, Some(2));
    }
}
