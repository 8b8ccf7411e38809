//! One replay: the fixture's body from the provider stub (a raw turn, over real loopback HTTP)
//! into the real, committed driver component, called the way the gateway calls it, with every
//! `murmur:stream/events` call recorded.

use std::sync::{Arc, Mutex, PoisonError};

use capsule_protocol::manifest::Limits;
use capsule_protocol::neutral::{DriverRequest, Message};
use capsule_runtime::{
    ArtifactRole, GatewayRoute, Grants, GuestEvents, Host, HostOptions, LoadedArtifact, OutgoingPolicy, ToolInput,
    ToolStatus, gateway_address,
};
use capsule_stub::{RawResponse, RecordedRequest, Script, Stub, Turn};
use serde_json::{Value, json};

use crate::fixture::Fixture;

/// The model string the driver is given.
const MODEL: &str = "conformance-model";

/// A driver call that hangs is a failed fixture, not a hung test run.
const DEADLINE_SECONDS: u64 = 60;

/// The committed driver component of a provider, loaded once.
pub struct Driver {
    host: Host,
    artifact: LoadedArtifact,
    name: String,
}

/// The committed component's path.
pub fn component(provider: &str) -> std::path::PathBuf {
    std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(format!("components/dist/driver-{provider}.wasm"))
}

impl Driver {
    /// Loads `components/dist/driver-<provider>.wasm`, compiled through the shared test cache.
    pub fn load(provider: &str) -> Result<Driver, String> {
        let cache = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/test-component-cache");
        let host = Host::new(HostOptions { cache_dir: Some(cache) })
            .map_err(|e| format!("the sandbox host does not start: {e}"))?;
        let path = component(provider);
        let artifact = LoadedArtifact::load_file(&host, provider, &path)
            .map_err(|e| format!("{} does not load: {e}", path.display()))?;
        Ok(Driver { host, artifact, name: provider.to_owned() })
    }
}

/// What came back from one replay.
pub struct Observed {
    /// `passed`, `failed` or `error`.
    pub tool_status: String,
    /// `tool-result.summary`.
    pub summary: Option<String>,
    /// `tool-result.data`, parsed; `Err` says why it could not be.
    pub response: Result<Value, String>,
    /// Every event, in order, in the fixtures' notation.
    pub events: Vec<Value>,
    /// What the stub received.
    pub requests: Vec<RecordedRequest>,
}

/// Replays `fixture` into `driver`. `Err` when the call itself failed (a trap, the deadline) or
/// the stub could not start.
pub async fn replay(driver: &Driver, fixture: &Fixture) -> Result<Observed, String> {
    let raw = RawResponse {
        status: fixture.status,
        content_type: fixture.content_type.clone(),
        chunk_bytes: fixture.chunk_bytes,
        ..RawResponse::file(&fixture.body)
    };
    let stub = Stub::start(Script::new(vec![Turn::raw(raw)])).map_err(|e| format!("the stub does not start: {e}"))?;
    let endpoint = stub.url().parse().map_err(|e| format!("the stub URL {} does not parse: {e}", stub.url()))?;
    let grants = Grants {
        role: ArtifactRole::Driver,
        env: vec![
            ("MURMUR_CAPSULE_NAME".into(), "conformance".into()),
            ("MURMUR_CAPSULE_VERSION".into(), "0.1.0".into()),
            ("MURMUR_SESSION_ID".into(), "ses_conformance".into()),
            ("MURMUR_INFERENCE_ENDPOINT".into(), gateway_address()),
            ("MURMUR_INFERENCE_MODEL".into(), MODEL.into()),
            ("MURMUR_INFERENCE_DRIVER".into(), driver.name.clone()),
            ("MURMUR_INFERENCE_TRANSPORT".into(), "http".into()),
        ]
        .into(),
        preopen: None,
        disk: Default::default(),
        limits: Limits { deadline_seconds: DEADLINE_SECONDS, ..Limits::default() },
        policy: OutgoingPolicy {
            allow: Vec::new(),
            gateway: Some(GatewayRoute {
                endpoint,
                fixed: None,
                key: None,
                style: Default::default(),
                traceparent: None,
            }),
            gate: None,
        },
    };
    let recorder = Arc::new(Recorder::default());
    let events: Arc<dyn GuestEvents> = recorder.clone();
    let outcome =
        driver.artifact.call(&driver.host, &grants, events, ToolInput { data: Some(request()), log_path: None }).await;
    let result = outcome
        .result
        .map_err(|e| format!("the call did not return a result: {e}; guest stderr: {:?}", outcome.stderr))?;
    let tool_status = match result.status {
        ToolStatus::Passed => "passed",
        ToolStatus::Failed => "failed",
        ToolStatus::Error => "error",
    };
    let response = match &result.data {
        Some(data) => serde_json::from_str(data).map_err(|e| format!("tool-result.data is not JSON ({e}): {data:?}")),
        None => Err("tool-result.data is absent".to_owned()),
    };
    Ok(Observed {
        tool_status: tool_status.to_owned(),
        summary: result.summary,
        response,
        events: recorder.take(),
        requests: stub.requests(),
    })
}

/// The one fixed neutral request: one user message, no tools.
fn request() -> String {
    let request = DriverRequest {
        model: MODEL.into(),
        max_tokens: 1024,
        system: String::new(),
        messages: vec![Message::user_text("What is the weather in Paris?")],
        tools: Vec::new(),
        params: serde_json::Map::new(),
        continuation_id: None,
        prompt_cache_key: "conformance:0.1.0".into(),
    };
    serde_json::to_string(&request).expect("a neutral request serializes")
}

/// Records every event in the fixtures' notation.
#[derive(Default)]
struct Recorder(Mutex<Vec<Value>>);

impl Recorder {
    fn push(&self, event: Value) {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).push(event);
    }

    fn take(&self) -> Vec<Value> {
        std::mem::take(&mut *self.0.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

impl GuestEvents for Recorder {
    fn chunk(&self, text: String) {
        self.push(json!(["chunk", text]));
    }
    fn thinking(&self, text: String) {
        self.push(json!(["thinking", text]));
    }
    fn tool_call_started(&self, id: String, name: String) {
        self.push(json!(["tool_call_started", id, name]));
    }
    fn tool_call_input_bytes(&self, id: String, bytes: u64) {
        self.push(json!(["tool_call_input_bytes", id, bytes]));
    }
}
