//! The tools actor: runs the capsule's WASM tool calls, one at a time, each in a fresh store
//! with only the tool's grants. A tool failure (failed status, trap, deadline, memory limit) is
//! an error result for the model, never a crash of the session.

use capsule_runtime::{Grants, GuestEvents, Host, LoadedArtifact, ToolInput, ToolStatus};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

/// What the tools actor is asked: run one tool call (and a test hook that crashes it).
pub enum ToolsMsg {
    /// Run one call.
    Run {
        /// Tool (artifact) name.
        name: String,
        /// Input JSON text.
        input: String,
        /// Where the tool's `request-input` goes (the task it runs for).
        events: Arc<dyn GuestEvents>,
        /// Answer.
        reply: RpcReplyPort<ToolRunReply>,
    },
    /// Test hook: panic inside the handler, as a host bug would.
    InjectPanic,
}

/// One finished tool call.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolRunReply {
    /// What the model sees.
    pub content: String,
    /// Whether it is an error result.
    pub is_error: bool,
    /// Wall time.
    pub duration_ms: u64,
    /// Whether the tool truncated its output.
    pub truncated: bool,
    /// The diagnostic code when the call itself failed (trap, limit).
    pub code: Option<&'static str>,
}

/// One tool the actor can run.
#[derive(Clone)]
pub struct ToolEntry {
    /// The loaded component.
    pub artifact: LoadedArtifact,
    /// Its grants.
    pub grants: Grants,
}

/// Arguments (and state).
#[derive(Clone)]
pub struct ToolsArgs {
    /// The sandbox host.
    pub host: Host,
    /// Tools by name.
    pub tools: HashMap<String, ToolEntry>,
}

/// The tools actor: runs each tool call in its own sandboxed store.
pub struct Tools;

impl Actor for Tools {
    type Msg = ToolsMsg;
    type State = ToolsArgs;
    type Arguments = ToolsArgs;

    async fn pre_start(&self, _myself: ActorRef<ToolsMsg>, args: ToolsArgs) -> Result<ToolsArgs, ActorProcessingErr> {
        Ok(args)
    }

    async fn handle(
        &self,
        _myself: ActorRef<ToolsMsg>,
        msg: ToolsMsg,
        state: &mut ToolsArgs,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolsMsg::Run { name, input, events, reply } => {
                let r = run(state, &name, input, events).await;
                let _ = reply.send(r);
            }
            ToolsMsg::InjectPanic => panic!("tools: injected panic (test hook)"),
        }
        Ok(())
    }
}

async fn run(state: &ToolsArgs, name: &str, input: String, events: Arc<dyn GuestEvents>) -> ToolRunReply {
    let started = Instant::now();
    let Some(entry) = state.tools.get(name) else {
        return ToolRunReply {
            content: format!("tool `{name}` is not declared in this capsule"),
            is_error: true,
            duration_ms: 0,
            truncated: false,
            code: None,
        };
    };
    let outcome =
        entry.artifact.call(&state.host, &entry.grants, events, ToolInput { data: Some(input), log_path: None }).await;
    let duration_ms = started.elapsed().as_millis() as u64;
    match outcome.result {
        Ok(r) => {
            let is_error = r.status != ToolStatus::Passed;
            let content = match (r.data, r.summary) {
                (Some(d), _) if !is_error => d,
                (Some(d), Some(s)) => format!("{s}\n{d}"),
                (Some(d), None) => d,
                (None, Some(s)) => s,
                (None, None) => String::new(),
            };
            ToolRunReply { content, is_error, duration_ms, truncated: r.truncated, code: None }
        }
        Err(e) => ToolRunReply {
            content: e.to_string(),
            is_error: true,
            duration_ms,
            truncated: false,
            code: Some(e.code().as_str()),
        },
    }
}
