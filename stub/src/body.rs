//! The body of a streamed answer: one frame per SSE event, optionally ending in a dropped
//! connection.
//!
//! Guarantees: the runtime gets a turn between frames (so the HTTP server writes each event out
//! as it is produced rather than batching the whole stream); with a pause (a turn's
//! `event_interval_ms`) the body sleeps that long between two frames instead, so `n` frames are
//! spread over at least `(n - 1) × pause`; the request's `stub_elapsed_ns` is recorded just
//! before the last frame is handed over, each frame's hand-over instant is appended to the
//! request's `event_sent_unix_ns`, and a cut body ends in an error so the server drops the
//! connection instead of terminating the chunked body (the cut follows the last frame after a
//! yield, not a pause). Deliberately not here: deciding what the events are.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use bytes::Bytes;

use crate::record::Entry;
use crate::server::Shared;

/// The state of a streamed body.
struct Feed {
    events: VecDeque<Bytes>,
    cut: bool,
    first: bool,
    shared: Arc<Shared>,
    entry: Entry,
    timed: bool,
    pause: Option<Duration>,
}

impl Feed {
    /// Records the answer time once, when the last byte is about to be handed over.
    fn time(&mut self) {
        if !self.timed {
            self.timed = true;
            self.shared.recorder.finish(self.entry);
        }
    }
}

/// A body that yields one frame per event, waiting `pause` (when given and not zero) between two
/// frames, and, when `cut`, then fails so the connection drops.
pub(crate) fn event_body(
    shared: Arc<Shared>,
    entry: Entry,
    events: Vec<Bytes>,
    cut: bool,
    pause: Option<Duration>,
) -> Body {
    let feed = Feed {
        events: events.into(),
        cut,
        first: true,
        shared,
        entry,
        timed: false,
        pause: pause.filter(|p| !p.is_zero()),
    };
    let stream = futures::stream::unfold(feed, |mut feed| async move {
        match feed.pause {
            // Between two frames: the scripted pause (the server writes the last one meanwhile).
            Some(pause) if !feed.first && !feed.events.is_empty() => {
                tokio::time::sleep(pause).await;
            }
            // Let the server write out what it has before the next event or the cut.
            _ if !feed.first || feed.events.is_empty() => tokio::task::yield_now().await,
            _ => {}
        }
        feed.first = false;
        if let Some(event) = feed.events.pop_front() {
            if feed.events.is_empty() {
                feed.time();
            }
            feed.shared.recorder.sent(feed.entry);
            return Some((Ok(event), feed));
        }
        feed.time();
        if feed.cut {
            feed.cut = false;
            return Some((Err(std::io::Error::other("the stub script cuts the connection here")), feed));
        }
        None
    });
    Body::from_stream(stream)
}
