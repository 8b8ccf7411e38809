//! Manifest types. Every struct refuses unknown keys; every default is a real limit.

use super::sections::{Compaction, Observability};
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The default memory limit per component call: 512 MiB.
pub const DEFAULT_MEMORY_BYTES: u64 = 512 * 1024 * 1024;
/// The default deadline per component call: 600 s.
pub const DEFAULT_DEADLINE_SECONDS: u64 = 600;
/// The default table-element limit per component call.
pub const DEFAULT_TABLE_ELEMENTS: u32 = 100_000;
/// The default instance limit per component call.
pub const DEFAULT_INSTANCES: u32 = 1000;
/// The default cap on live WASI resources (fields, streams, descriptors, requests) per call.
pub const DEFAULT_RESOURCES: u32 = 1024;
/// The default cap on a call's result (`tool-result.data` and the summary), in bytes.
pub const DEFAULT_OUTPUT_BYTES: u64 = 4 * 1024 * 1024;
/// The default cap on bytes a session's tools may write to files, all calls together.
pub const DEFAULT_DISK_BYTES: u64 = 1024 * 1024 * 1024;
/// The default cap on one HTTP response's body a guest reads (a provider stream included).
pub const DEFAULT_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;
/// The default number of inference calls per task.
pub const DEFAULT_MAX_TURNS: u32 = 10;
/// The default output cap per call when the model is not known.
pub const DEFAULT_MAX_TOKENS: u32 = 8192;

/// The whole `murmur.yaml`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Manifest {
    /// Capsule name: `[a-z0-9-]`, 1..100 chars.
    pub name: String,
    /// Capsule version (free text; `0.0.0` when absent).
    #[serde(default = "default_version")]
    pub version: String,
    /// The artifacts (drivers and tools) this capsule uses.
    #[serde(default)]
    pub artifacts: Vec<Artifact>,
    /// Capsule-wide capability grants; an artifact's own block may only narrow them.
    #[serde(default)]
    pub capabilities: Capabilities,
    /// The inference block.
    pub inference: Inference,
    /// Context window settings.
    #[serde(default)]
    pub context: Context,
    /// The control surface (CONTRACT §7); absent means no surface.
    #[serde(default)]
    pub control: Control,
    /// Task acceptance and what happens after a task.
    #[serde(default)]
    pub lifecycle: Lifecycle,
    /// The door's own network settings (who may use it).
    #[serde(default)]
    pub network: DoorNetwork,
    /// Where spans go.
    #[serde(default)]
    pub observability: Observability,
}

/// Top-level `network`: the door's settings (a guest's reach is `capabilities.network`).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct DoorNetwork {
    /// `bearer`: every JSON-RPC request to the door (streams included) must carry
    /// `Authorization: Bearer <token>`, the token minted per session into `door.token`.
    /// `none` (the default): any local process may use the door.
    #[serde(default)]
    pub authentication: DoorAuthentication,
    /// The door's port when `--port` is not given (an OS-chosen port when absent).
    #[serde(default)]
    pub internal_port: Option<u16>,
}

/// `network.authentication`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum DoorAuthentication {
    /// No token.
    #[default]
    None,
    /// A bearer token per session.
    Bearer,
}

fn default_version() -> String {
    "0.0.0".to_string()
}

/// What kind of artifact (`tool` when a capsule manifest does not say, as in Murmur).
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum ArtifactRuntime {
    /// An inference driver.
    Driver,
    /// A tool the model can call.
    #[default]
    Tool,
    /// A lifecycle hook: the runtime calls it; the model never sees it.
    Hook,
}

/// One entry of `artifacts[]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Artifact {
    /// Name, unique in the capsule; tools are offered to the model under this name.
    pub name: String,
    /// Version, informational.
    #[serde(default)]
    pub version: Option<String>,
    /// Driver or tool (`tool` when absent, as in Murmur).
    #[serde(default)]
    pub runtime: ArtifactRuntime,
    /// A `.wasm` file, or a folder with the artifact's own `murmur.yaml`; relative to the
    /// manifest's folder.
    #[serde(default)]
    pub source: Option<String>,
    /// JSON handed to this artifact only, as `MURMUR_ARTIFACT_CONFIG`.
    #[serde(default)]
    pub config: Option<Value>,
    /// How this artifact reaches its upstream.
    #[serde(default)]
    pub gateway: Option<Gateway>,
    /// This artifact's own grants: they narrow the capsule's, never widen.
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
    /// Murmur's: whether `source` is a local path (every `source` is, here). Warned, no effect.
    #[serde(default)]
    pub local_source: Option<Value>,
    /// Murmur's: what of a skill goes into the prompt. Warned, no effect.
    #[serde(default)]
    pub prompt_payload: Option<Value>,
    /// Murmur's, hooks only: what a full hook queue does. Warned, no effect.
    #[serde(default)]
    pub on_overflow: Option<Value>,
}

/// `artifacts[].gateway`: the upstream and its credential.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Gateway {
    /// `https://…`, or `http://` to a loopback host only.
    pub endpoint: String,
    /// `${NAME}` or a literal.
    #[serde(default)]
    pub api_key: Option<String>,
    /// No credential at all.
    #[serde(default)]
    pub keyless: bool,
}

/// Capability grants (CONTRACT §4).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Capabilities {
    /// Outbound HTTP allowlist.
    #[serde(default)]
    pub network: Network,
    /// The preopened folder for tools.
    #[serde(default)]
    pub filesystem: Filesystem,
    /// Host environment variables a guest may see.
    #[serde(default)]
    pub env: EnvGrant,
    /// Per-call limits.
    #[serde(default)]
    pub limits: Limits,
}

/// `capabilities.network`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Network {
    /// `https://host[:port]`, `host` or `host:port`. Empty means nothing.
    #[serde(default)]
    pub allow: Vec<String>,
}

/// `capabilities.filesystem`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Filesystem {
    /// Folder relative to the workdir, preopened as `.` for tools.
    #[serde(default = "default_scope")]
    pub scope: String,
}

impl Default for Filesystem {
    fn default() -> Self {
        Filesystem { scope: default_scope() }
    }
}

fn default_scope() -> String {
    ".".to_string()
}

/// `capabilities.env`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct EnvGrant {
    /// Names of host variables passed through (credential-shaped names never are).
    #[serde(default)]
    pub allow: Vec<String>,
}

/// `capabilities.limits`: per component call.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct Limits {
    /// Linear memory a call may grow to, in bytes.
    #[serde(default = "d_mem")]
    pub memory_bytes: u64,
    /// Wall time a call may take.
    #[serde(default = "d_deadline")]
    pub deadline_seconds: u64,
    /// Table elements a call may grow to.
    #[serde(default = "d_tables")]
    pub table_elements: u32,
    /// Instances a call may create.
    #[serde(default = "d_instances")]
    pub instances: u32,
    /// Live WASI resources a call may hold at once (header fields, streams, open files...).
    #[serde(default = "d_resources")]
    pub resources: u32,
    /// Bytes a call's result may carry (data plus summary).
    #[serde(default = "d_output")]
    pub output_bytes: u64,
    /// Bytes the session's calls of this artifact may write to files, all calls together; one
    /// call may write at most this much too.
    #[serde(default = "d_disk")]
    pub disk_bytes: u64,
    /// Bytes of one HTTP response body a call may read (an endless provider stream is cut).
    #[serde(default = "d_response")]
    pub response_bytes: u64,
}

fn d_mem() -> u64 {
    DEFAULT_MEMORY_BYTES
}
fn d_deadline() -> u64 {
    DEFAULT_DEADLINE_SECONDS
}
fn d_tables() -> u32 {
    DEFAULT_TABLE_ELEMENTS
}
fn d_instances() -> u32 {
    DEFAULT_INSTANCES
}
fn d_resources() -> u32 {
    DEFAULT_RESOURCES
}
fn d_output() -> u64 {
    DEFAULT_OUTPUT_BYTES
}
fn d_disk() -> u64 {
    DEFAULT_DISK_BYTES
}
fn d_response() -> u64 {
    DEFAULT_RESPONSE_BYTES
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            memory_bytes: DEFAULT_MEMORY_BYTES,
            deadline_seconds: DEFAULT_DEADLINE_SECONDS,
            table_elements: DEFAULT_TABLE_ELEMENTS,
            instances: DEFAULT_INSTANCES,
            resources: DEFAULT_RESOURCES,
            output_bytes: DEFAULT_OUTPUT_BYTES,
            disk_bytes: DEFAULT_DISK_BYTES,
            response_bytes: DEFAULT_RESPONSE_BYTES,
        }
    }
}

/// `inference`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Inference {
    /// Only `http`.
    #[serde(default = "default_transport")]
    pub transport: String,
    /// The primary choice's model.
    pub model: String,
    /// The primary driver.
    pub driver: DriverRef,
    /// Older spelling of the primary driver's gateway endpoint.
    #[serde(default)]
    pub endpoint: Option<String>,
    /// Older spelling of the primary driver's gateway credential.
    #[serde(default)]
    pub api_key: Option<String>,
    /// More driver choices (CONTRACT §6).
    #[serde(default)]
    pub alternates: Vec<Alternate>,
    /// Inference calls a task may make.
    #[serde(default = "default_max_turns")]
    pub max_turns: u32,
    /// Output cap per call; resolved per model when absent.
    #[serde(default)]
    pub max_tokens: Option<u32>,
    /// Spend ceiling for the session.
    #[serde(default)]
    pub max_session_tokens: Option<u64>,
    /// System prompt text.
    #[serde(default)]
    pub system_prompt: Option<String>,
    /// System prompt file, relative to the manifest's folder.
    #[serde(default)]
    pub system_prompt_file: Option<String>,
    /// Times a call that a provider answered 429 or 5xx is sent again (each admitted and
    /// traced), waiting its `retry-after` or a doubling backoff.
    #[serde(default = "default_max_retries")]
    pub max_retries: u32,
    /// Times an `on-task-end` hook may send a task back (`reopen-task`).
    #[serde(default = "default_max_task_reopens")]
    pub max_task_reopens: u32,
    /// When and how the context is compacted.
    #[serde(default)]
    pub compaction: Compaction,
}

fn default_max_task_reopens() -> u32 {
    1
}

/// The default number of retries of a call a provider answered 429 or 5xx.
pub const DEFAULT_MAX_RETRIES: u32 = 2;

fn default_max_retries() -> u32 {
    DEFAULT_MAX_RETRIES
}

fn default_transport() -> String {
    "http".to_string()
}
fn default_max_turns() -> u32 {
    DEFAULT_MAX_TURNS
}

/// `inference.driver` and `alternates[].driver`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DriverRef {
    /// A declared `runtime: driver` artifact.
    pub artifact: String,
    /// JSON handed to every declared driver as `MURMUR_INFERENCE_DRIVER_CONFIG`.
    #[serde(default)]
    pub config: Option<Value>,
}

/// `inference.alternates[]`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Alternate {
    /// Choice name: unique, not `primary`.
    pub name: String,
    /// Model of this choice.
    pub model: String,
    /// Driver artifact name (a declared `runtime: driver`), or `{artifact}`.
    pub driver: AlternateDriver,
}

/// An alternate's driver: a bare artifact name or a `{artifact, config?}` block.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(untagged)]
pub enum AlternateDriver {
    /// `driver: name`.
    Name(String),
    /// `driver: {artifact: name}`.
    Ref(DriverRef),
}

impl AlternateDriver {
    /// The artifact name either way.
    pub fn artifact(&self) -> &str {
        match self {
            AlternateDriver::Name(n) => n,
            AlternateDriver::Ref(r) => &r.artifact,
        }
    }
}

/// `context`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Context {
    /// Context window used for occupancy; per model when absent.
    #[serde(default)]
    pub max_tokens: Option<u32>,
}

/// `control`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Control {
    /// Settings an operator may change (`inference.driver`, `inference.max_tokens`).
    #[serde(default)]
    pub settings: Vec<String>,
    /// Secret names an operator may inject.
    #[serde(default)]
    pub secrets: Vec<String>,
    /// Settings the agent itself may change.
    #[serde(default)]
    pub agent_settings: Vec<String>,
}

impl Control {
    /// Whether the surface exists at all.
    pub fn enabled(&self) -> bool {
        !self.settings.is_empty() || !self.secrets.is_empty()
    }
}

/// `lifecycle.task_acceptance`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq, Default)]
#[serde(rename_all = "lowercase")]
pub enum TaskAcceptance {
    /// Only the task given at launch.
    None,
    /// One task at a time; a busy capsule rejects.
    #[default]
    Single,
    /// Tasks queue behind the running one.
    Queue,
}

/// `lifecycle.after_task`.
#[derive(Debug, Clone, Copy, Serialize, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AfterTask {
    /// End the session.
    Exit,
    /// Keep serving.
    Sleep,
}

/// `lifecycle`.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Lifecycle {
    /// How tasks are accepted.
    #[serde(default)]
    pub task_acceptance: TaskAcceptance,
    /// What happens after a task; `exit`, or `sleep` for `queue`, when absent.
    #[serde(default)]
    pub after_task: Option<AfterTask>,
    /// Tasks waiting behind the running one.
    #[serde(default = "default_queue_depth")]
    pub queue_depth: u32,
    /// How long a task waits for a person (`input-required`) before it fails; no limit when
    /// absent.
    #[serde(default)]
    pub input_timeout_secs: Option<u64>,
}

fn default_queue_depth() -> u32 {
    1
}

impl Lifecycle {
    /// `after_task` with its default applied.
    pub fn after_task(&self) -> AfterTask {
        self.after_task.unwrap_or(match self.task_acceptance {
            TaskAcceptance::Queue => AfterTask::Sleep,
            _ => AfterTask::Exit,
        })
    }
}

impl Manifest {
    /// The declared artifact of that name.
    pub fn artifact(&self, name: &str) -> Option<&Artifact> {
        self.artifacts.iter().find(|a| a.name == name)
    }

    /// The primary driver's effective gateway: its `gateway:` block, or the older
    /// `inference.endpoint` + `inference.api_key` spelling.
    pub fn primary_gateway(&self) -> Option<Gateway> {
        let driver = self.artifact(&self.inference.driver.artifact)?;
        if let Some(g) = &driver.gateway {
            return Some(g.clone());
        }
        self.inference.endpoint.as_ref().map(|endpoint| Gateway {
            endpoint: endpoint.clone(),
            api_key: self.inference.api_key.clone(),
            keyless: self.inference.api_key.is_none(),
        })
    }
}
