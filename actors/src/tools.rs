//! The tools actor: runs the capsule's WASM tool calls, one at a time, each in a fresh store
//! with only the tool's grants. A tool failure (failed status, trap, deadline, memory limit) is
//! an error result for the model, never a crash of the session.

use capsule_protocol::Code;
use capsule_runtime::{Grants, GuestEvents, Host, LoadedArtifact, ToolAhead, ToolInput, ToolStatus, Waits};
use ractor::{Actor, ActorProcessingErr, ActorRef};
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
        /// Where the answer goes (straight to the task's loop, no task in between).
        answer: ToolAnswer,
    },
    /// Test hook: panic inside the handler, as a host bug would.
    InjectPanic,
}

/// Where a tool call's answer goes. It is sent once; dropped unsent (the tools actor crashed
/// during the call, or stopped or was not running with the call still queued) it sends
/// [`crashed`] instead, so whoever asked always hears back exactly once.
pub struct ToolAnswer(Option<Box<dyn FnOnce(ToolRunReply) + Send>>);

impl ToolAnswer {
    /// An answer that calls `send` with the reply.
    pub fn new(send: impl FnOnce(ToolRunReply) + Send + 'static) -> ToolAnswer {
        ToolAnswer(Some(Box::new(send)))
    }

    /// Send the reply.
    pub fn send(mut self, reply: ToolRunReply) {
        if let Some(send) = self.0.take() {
            send(reply);
        }
    }
}

impl Drop for ToolAnswer {
    fn drop(&mut self) {
        if let Some(send) = self.0.take() {
            send(crashed());
        }
    }
}

/// The answer of a call the tools actor never finished: it crashed (and is being restarted).
pub fn crashed() -> ToolRunReply {
    ToolRunReply {
        content: format!("{}: the tools actor crashed during the call and is being restarted", Code::ActorCrashed),
        is_error: true,
        duration_ms: 0,
        truncated: false,
        code: Some(Code::ActorCrashed.as_str()),
        made_ahead: false,
    }
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
    /// Whether the call ran in an instance made while the provider answered
    /// (`capsule_runtime::ToolAhead`).
    pub made_ahead: bool,
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
    /// The session's waits for its provider, in which each tool's next instance is made.
    pub waits: Waits,
}

/// The tools actor: runs each tool call in its own sandboxed store.
pub struct Tools;

/// The tools actor's state: what it was started with, and each tool's next instance.
pub struct ToolsState {
    args: ToolsArgs,
    /// Each tool's next instance, made while the provider answers (`capsule_runtime::ToolAhead`).
    ahead: HashMap<String, ToolAhead>,
}

impl Actor for Tools {
    type Msg = ToolsMsg;
    type State = ToolsState;
    type Arguments = ToolsArgs;

    async fn pre_start(&self, _myself: ActorRef<ToolsMsg>, args: ToolsArgs) -> Result<ToolsState, ActorProcessingErr> {
        // Each tool's first instance is made in the session's first wait.
        let ahead = args
            .tools
            .iter()
            .map(|(name, t)| (name.clone(), ToolAhead::first(&t.artifact, &args.host, &t.grants, &args.waits)))
            .collect();
        Ok(ToolsState { args, ahead })
    }

    async fn handle(
        &self,
        _myself: ActorRef<ToolsMsg>,
        msg: ToolsMsg,
        state: &mut ToolsState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            ToolsMsg::Run { name, input, events, answer } => {
                let r = run(state, &name, input, events).await;
                answer.send(r);
            }
            ToolsMsg::InjectPanic => panic!("tools: injected panic (test hook)"),
        }
        Ok(())
    }
}

async fn run(state: &mut ToolsState, name: &str, input: String, events: Arc<dyn GuestEvents>) -> ToolRunReply {
    let started = Instant::now();
    let ToolsState { args: state, ahead } = state;
    let Some(entry) = state.tools.get(name) else {
        return ToolRunReply {
            content: format!("tool `{name}` is not declared in this capsule"),
            is_error: true,
            duration_ms: 0,
            truncated: false,
            code: None,
            made_ahead: false,
        };
    };
    let input = ToolInput { data: Some(input), log_path: None };
    let ahead = ahead.entry(name.to_string()).or_default();
    let outcome = entry.artifact.call_tool_ahead(&state.host, &entry.grants, events, input, ahead, &state.waits).await;
    let duration_ms = started.elapsed().as_millis() as u64;
    let made_ahead = outcome.made_ahead;
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
            ToolRunReply { content, is_error, duration_ms, truncated: r.truncated, code: None, made_ahead }
        }
        Err(e) => ToolRunReply {
            content: e.to_string(),
            is_error: true,
            duration_ms,
            truncated: false,
            code: Some(e.code().as_str()),
            made_ahead,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// An answer that records what it is sent.
    fn recorded() -> (ToolAnswer, Arc<Mutex<Vec<ToolRunReply>>>) {
        let got = Arc::new(Mutex::new(Vec::new()));
        let sink = got.clone();
        (ToolAnswer::new(move |r| sink.lock().expect("lock").push(r)), got)
    }

    fn ok(content: &str) -> ToolRunReply {
        ToolRunReply {
            content: content.into(),
            is_error: false,
            duration_ms: 1,
            truncated: false,
            code: None,
            made_ahead: false,
        }
    }

    #[test]
    fn an_answer_is_sent_once_and_one_dropped_unsent_says_the_tools_actor_crashed() {
        let (answer, got) = recorded();
        answer.send(ok("listed"));
        assert_eq!(*got.lock().expect("lock"), vec![ok("listed")], "sent once, not again when it goes");
        let (answer, got) = recorded();
        drop(answer);
        let got = got.lock().expect("lock");
        assert_eq!(got.len(), 1);
        assert_eq!(got[0], crashed());
        assert!(got[0].is_error && got[0].code == Some(Code::ActorCrashed.as_str()), "{:?}", got[0]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_call_queued_behind_a_crash_is_answered_as_crashed() {
        let host = Host::new(capsule_runtime::HostOptions { cache_dir: None }).expect("host");
        let (tools, handle) =
            Actor::spawn(None, Tools, ToolsArgs { host, tools: HashMap::new(), waits: Waits::default() })
                .await
                .expect("spawn");
        let (answer, got) = recorded();
        let events: Arc<dyn GuestEvents> = Arc::new(capsule_runtime::NoEvents);
        // Both are queued before the actor handles either: the crash comes first and the call
        // is never run.
        tools.cast(ToolsMsg::InjectPanic).expect("queued");
        let queued = tools.cast(ToolsMsg::Run { name: "files".into(), input: "{}".into(), events, answer });
        handle.await.expect("the actor stopped");
        // Queued or refused, the message is gone by now and its answer was sent.
        drop(queued);
        assert_eq!(*got.lock().expect("lock"), vec![crashed()]);
    }
}
