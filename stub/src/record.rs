//! The request log: what the stub received, in arrival order, and how long it took to answer.
//!
//! Guarantees: requests appear in the order their handlers started, and a model request's entry
//! and its turn number are taken under one lock, so entry order and turn order agree. A request's
//! `stub_elapsed_ns` is written before its last body byte is handed to the HTTP server, so a client
//! that has read a whole response and then asks for the log sees the final figure.
//!
//! Deliberately not here: persistence, or any limit on size. The log lives as long as the stub,
//! which is as long as one test or one demo.

use std::sync::{Mutex, MutexGuard};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Which provider wire format a request was answered in.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// Anthropic Messages (`…/messages`).
    Anthropic,
    /// OpenAI Chat Completions (`…/chat/completions`).
    #[serde(rename = "openai")]
    OpenAi,
}

/// One request as the stub received it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedRequest {
    /// The HTTP method, for example `POST`.
    pub method: String,
    /// The request path, without the query string.
    pub path: String,
    /// The headers in arrival order, names lowercased; values that are not UTF-8 are converted
    /// lossily.
    pub headers: Vec<(String, String)>,
    /// The body as JSON, or a JSON string holding the raw text when it is not JSON (an empty body
    /// is the empty string).
    pub body: serde_json::Value,
    /// When the request arrived, in nanoseconds since the Unix epoch.
    pub received_unix_ns: u128,
    /// Nanoseconds from the request's arrival to the last body byte the stub handed to the HTTP
    /// server (0 while the answer is still being produced, or if the client went away first).
    pub stub_elapsed_ns: u128,
    /// For an answer sent frame by frame (a streamed answer, or a raw turn with `chunk_bytes`):
    /// when each frame was handed to the HTTP server, in nanoseconds since the Unix epoch, one
    /// entry per frame in sending order (one frame per SSE event for rendered streams). Empty for
    /// an answer sent as one body. Lets a client measure per-event latency against its own
    /// arrival times (same process clock).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub event_sent_unix_ns: Vec<u128>,
    /// For a model request, the script turn that answered it (a number past the end of the
    /// script when the script was exhausted). For any other request, the number of model requests
    /// received before it, which is the turn the next model request will get.
    pub turn: usize,
    /// The client's source port: requests with the same port came over one connection (0 when
    /// unknown).
    #[serde(default)]
    pub client_port: u16,
    /// The wire format for a model request (a `POST` to a provider path); `None` for anything
    /// else (unknown paths, other methods), which consumes no turn.
    pub provider: Option<Provider>,
}

/// The shared, append-only log plus the model-request counter.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    requests: Vec<RecordedRequest>,
    model_requests: usize,
}

/// Where a request sits in the log, and when it arrived, so its timing can be completed later.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Entry {
    /// Position in the log.
    pub index: usize,
    /// Arrival, for `stub_elapsed_ns`.
    pub arrived: Instant,
}

impl Recorder {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // A panic elsewhere while holding the lock cannot leave the log half-written (every update
        // is a single push or field store), so a poisoned lock is still safe to use.
        self.inner.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Appends a request. When `provider` is set it is a model request and takes the next turn.
    /// Returns the log entry and the request's turn number.
    pub(crate) fn begin(&self, mut request: RecordedRequest, arrived: Instant) -> (Entry, usize) {
        let mut inner = self.lock();
        let turn = inner.model_requests;
        if request.provider.is_some() {
            inner.model_requests += 1;
        }
        request.turn = turn;
        let index = inner.requests.len();
        inner.requests.push(request);
        (Entry { index, arrived }, turn)
    }

    /// Writes how long the answer took, measured now.
    pub(crate) fn finish(&self, entry: Entry) {
        let elapsed = entry.arrived.elapsed().as_nanos();
        if let Some(request) = self.lock().requests.get_mut(entry.index) {
            request.stub_elapsed_ns = elapsed;
        }
    }

    /// Notes that one frame of this request's answer is being handed to the HTTP server now.
    pub(crate) fn sent(&self, entry: Entry) {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |since| since.as_nanos());
        if let Some(request) = self.lock().requests.get_mut(entry.index) {
            request.event_sent_unix_ns.push(now);
        }
    }

    /// A copy of the log.
    pub(crate) fn snapshot(&self) -> Vec<RecordedRequest> {
        self.lock().requests.clone()
    }
}
