//! Test hook `hook-probe` (world `hook`, no binding: it gets every event).
//!
//! It learns its capsule's name at `on-session-start` and keeps it for the session (the
//! runtime keeps one instance per hook), then behaves by what the name contains:
//!
//! | name contains | event | answer |
//! |---|---|---|
//! | `artifact` | `on-inference` | `artifact` with the turn, the decision and the events seen so far |
//! | `reopen` | `on-task-end` | `reopen-task("check again")` |
//! | `trap` | `on-inference` | a panic (a trap) |
//! | `spin` | `on-inference` | a loop that never ends |
//! | `outside` | `on-inference` | `replace-context`, which only compaction may return |
//! | `drop` | `on-compaction` | the history without its tool results |
//! | `failcompact` | `on-compaction` | an error string |
//! | `error` | `on-tool-call` | an error string |
//!
//! Everything else is answered `none`.

wit_bindgen::generate!({
    path: "../wit",
    world: "murmur:worlds/hook@0.1.0",
    generate_all,
});

use exports::murmur::hook::lifecycle::{
    CompactionEvent, Guest, HookOutput, InferenceEvent, SessionContext, SessionEndEvent, ShellEvent, StageEvent,
    TaskEndEvent, TaskStartEvent, ToolEvent,
};
use std::sync::Mutex;

struct Component;

/// The capsule's name and the events seen, kept across calls of this instance.
static SEEN: Mutex<(String, u64)> = Mutex::new((String::new(), 0));

fn note() -> (String, u64) {
    let mut g = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    g.1 += 1;
    g.clone()
}

fn mode(word: &str) -> Option<u64> {
    let (name, seen) = note();
    name.contains(word).then_some(seen)
}

impl Guest for Component {
    fn on_stage(_: StageEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_session_start(ctx: SessionContext) -> Result<HookOutput, String> {
        let mut g = SEEN.lock().unwrap_or_else(|p| p.into_inner());
        *g = (ctx.capsule_name, 1);
        Ok(HookOutput::None)
    }
    fn on_task_start(_: TaskStartEvent) -> Result<HookOutput, String> {
        note();
        Ok(HookOutput::None)
    }
    fn on_inference(e: InferenceEvent) -> Result<HookOutput, String> {
        let (name, seen) = note();
        if name.contains("trap") {
            panic!("hook-probe: trapping on purpose");
        }
        if name.contains("spin") {
            let mut n: u64 = 0;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        }
        if name.contains("outside") {
            return Ok(HookOutput::ReplaceContext(Vec::new()));
        }
        if name.contains("artifact") {
            let payload = format!(
                "{{\"hook\":\"hook-probe\",\"turn\":{},\"decision\":\"{}\",\"events_seen\":{seen}}}",
                e.turn, e.decision
            );
            return Ok(HookOutput::Artifact(payload));
        }
        Ok(HookOutput::None)
    }
    fn on_tool_call(_: ToolEvent) -> Result<HookOutput, String> {
        match mode("error") {
            Some(_) => Err("hook-probe: failing on purpose".into()),
            None => Ok(HookOutput::None),
        }
    }
    fn on_shell(_: ShellEvent) -> Result<HookOutput, String> {
        Ok(HookOutput::None)
    }
    fn on_compaction(e: CompactionEvent) -> Result<HookOutput, String> {
        if SEEN.lock().unwrap_or_else(|p| p.into_inner()).0.contains("failcompact") {
            return Err("hook-probe: cannot compact, on purpose".into());
        }
        match mode("drop") {
            Some(_) => Ok(HookOutput::ReplaceContext(e.messages.into_iter().filter(|m| m.role != "tool").collect())),
            None => Ok(HookOutput::None),
        }
    }
    fn on_task_end(_: TaskEndEvent) -> Result<HookOutput, String> {
        match mode("reopen") {
            Some(_) => Ok(HookOutput::ReopenTask("check again".into())),
            None => Ok(HookOutput::None),
        }
    }
    fn on_session_end(_: SessionEndEvent) -> Result<HookOutput, String> {
        note();
        Ok(HookOutput::None)
    }
}

export!(Component);
