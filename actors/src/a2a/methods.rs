//! The A2A methods, each turning one request into messages to the session: send (waiting or
//! not), stream, get, list, cancel and subscribe.

use axum::response::Response;
use capsule_protocol::frame::{Frame, TaskState};
use serde_json::{Value, json};

use super::events::{Folded, Mapped, TaskEvents};
use super::params::{self, Refusal};
use super::shape::Dialect;
use super::stream::{self, Plan};
use crate::agent_loop::{InputRefusal, TaskRecord};
use crate::door::rpc::code;
use crate::session::Session;

/// A method's answer: a JSON-RPC result, a refusal, or a stream.
pub enum Answer {
    /// `result`.
    Result(Value),
    /// `error`.
    Refused(Refusal),
    /// An SSE response.
    Stream(Response),
}

fn internal(e: impl std::fmt::Display) -> Answer {
    Answer::Refused((code::INTERNAL, e.to_string()))
}

fn not_found(id: &str) -> Answer {
    Answer::Refused((code::TASK_NOT_FOUND, format!("no task `{id}` in this session; ListTasks names them")))
}

/// Give `text` to a task waiting for input: the record after the answer, or the refusal.
async fn answer(s: &Session, d: Dialect, task_id: &str, text: &str) -> Result<TaskRecord, Answer> {
    match s.provide_input(task_id, text).await {
        Ok(Some(Ok(r))) => Ok(r),
        Ok(None) => Err(not_found(task_id)),
        Ok(Some(Err(InputRefusal::NotWaiting { state, .. }))) => Err(Answer::Refused((
            code::UNSUPPORTED_OPERATION,
            format!(
                "task `{task_id}` is {}; a message with a taskId continues only a task waiting for input ({}). Send it without taskId to start a new task",
                d.state(state),
                d.state(TaskState::InputRequired)
            ),
        ))),
        Ok(Some(Err(e))) => Err(internal(e)),
        Err(e) => Err(internal(e)),
    }
}

/// Read `task_id`'s frames until it ends or waits for input; then its record.
async fn settled(
    s: &Session,
    task_id: &str,
    rx: &mut tokio::sync::mpsc::Receiver<capsule_protocol::frame::SharedFrame>,
    done: Option<tokio::sync::oneshot::Receiver<crate::agent_loop::TaskOutcome>>,
) -> Result<TaskRecord, Answer> {
    let stops = |f: &Frame| matches!(f, Frame::Status { id, status, is_final, .. } if id == task_id && (*is_final || status.state == TaskState::InputRequired));
    let done = async move {
        match done {
            Some(d) => d.await.ok(),
            None => std::future::pending().await,
        }
    };
    tokio::pin!(done);
    loop {
        tokio::select! {
            o = &mut done => match o {
                // Answer from the outcome itself: the task's record may be gone if the session
                // is shutting down while this client waits.
                Some(o) => return Ok(crate::door::methods::record_of(o)),
                None => return Err(internal("the agent loop stopped before the task ended (it restarted or the session closed)")),
            },
            f = rx.recv() => match f {
                Some(f) if stops(&f.frame) => break,
                // Frames were lost: the record says whether the settling one was among them.
                Some(f) if matches!(f.frame, Frame::Lagged { .. }) => {
                    if let Ok(Some(r)) = s.get_task(task_id).await
                        && (r.state.is_final() || r.state == TaskState::InputRequired)
                    {
                        return Ok(r);
                    }
                }
                Some(_) => {}
                None => return Err(internal("the capsule closed before the task ended")),
            },
        }
    }
    match s.get_task(task_id).await {
        Ok(Some(r)) => Ok(r),
        Ok(None) => Err(not_found(task_id)),
        Err(e) => Err(internal(e)),
    }
}

/// `SendMessage` / `message/send`: a new task, or (with `taskId`) the answer to a task waiting
/// for input. Answers when the task ends or waits for input again, or at once with
/// `returnImmediately` (v1.0) / `blocking: false` (v0.3).
pub async fn send(s: &Session, d: Dialect, p: &params::Send) -> Answer {
    let text = match p.text(d) {
        Ok(t) => t,
        Err(r) => return Answer::Refused(r),
    };
    // Subscribed first, so the frame that settles the task cannot be missed.
    let Some(mut rx) = s.subscribe(None).await else { return internal("the stream emitter is not running") };
    let (record, done) = match &p.message.task_id {
        Some(t) => match answer(s, d, t, &text).await {
            Ok(r) => (r, None),
            Err(a) => return a,
        },
        None => match s.submit_from_door(&text, p.message.context_id.clone(), p.traceparent.clone()).await {
            Ok((r, done)) => (r, Some(done)),
            Err(e) => return internal(e),
        },
    };
    if record.state.is_final() || p.return_immediately() {
        return Answer::Result(d.send_result(d.task(&record, Vec::new())));
    }
    match settled(s, &record.id, &mut rx, done).await {
        Ok(r) => Answer::Result(d.send_result(d.task(&r, Vec::new()))),
        Err(a) => a,
    }
}

/// `SendStreamingMessage` / `message/stream`: the task first, then its events until its final
/// status (or `input-required`). The stream subscribes before the task is submitted (or
/// answered, for a message with a `taskId`), so it misses none of its frames.
pub async fn stream(s: &Session, d: Dialect, p: &params::Send, request_id: &Value) -> Answer {
    let text = match p.text(d) {
        Ok(t) => t,
        Err(r) => return Answer::Refused(r),
    };
    let Some(rx) = s.subscribe(None).await else { return internal("the stream emitter is not running") };
    let record = match &p.message.task_id {
        Some(t) => match answer(s, d, t, &text).await {
            Ok(r) => r,
            Err(a) => return a,
        },
        None => match s.submit_from_door(&text, p.message.context_id.clone(), p.traceparent.clone()).await {
            Ok((record, _done)) => record,
            Err(e) => return internal(e),
        },
    };
    let events = TaskEvents::new(d, &record.id, &record.context_id);
    let plan = Plan {
        request_id: request_id.clone(),
        lead: vec![d.task_event(d.task(&record, Vec::new()))],
        ended: record.state.is_final(),
        events,
    };
    Answer::Stream(stream::respond(plan, rx))
}

/// `GetTask` / `tasks/get`.
pub async fn get(s: &Session, d: Dialect, p: &params::TaskId) -> Answer {
    match s.get_task(&p.id).await {
        Ok(Some(r)) => Answer::Result(d.task(&r, Vec::new())),
        Ok(None) => not_found(&p.id),
        Err(e) => internal(e),
    }
}

/// `ListTasks`: newest first, filtered by context and state, in pages.
pub async fn list(s: &Session, d: Dialect, p: &params::List) -> Answer {
    let (size, start) = match p.page() {
        Ok(x) => x,
        Err(r) => return Answer::Refused(r),
    };
    let state = match p.status.as_deref() {
        None | Some("") | Some("TASK_STATE_UNSPECIFIED") => None,
        Some(name) => match d.parse_state(name) {
            Some(st) => Some(st),
            None => return Answer::Refused((code::INVALID_PARAMS, format!("status `{name}` is not a task state"))),
        },
    };
    let all = match s.list_tasks().await {
        Ok(all) => all,
        Err(e) => return internal(e),
    };
    let matching: Vec<&TaskRecord> = all
        .iter()
        .filter(|r| p.context_id.as_ref().is_none_or(|c| &r.context_id == c))
        .filter(|r| state.is_none_or(|st| r.state == st))
        .collect();
    let page: Vec<Value> = matching.iter().skip(start).take(size).map(|r| d.task(r, Vec::new())).collect();
    let next = if start + page.len() < matching.len() { (start + page.len()).to_string() } else { String::new() };
    Answer::Result(json!({"tasks": page, "nextPageToken": next, "pageSize": size, "totalSize": matching.len()}))
}

/// `CancelTask` / `tasks/cancel`: an ended task is not cancelable.
pub async fn cancel(s: &Session, d: Dialect, p: &params::TaskId) -> Answer {
    match s.get_task(&p.id).await {
        Ok(None) => return not_found(&p.id),
        Ok(Some(r)) if r.state.is_final() => {
            return Answer::Refused((
                code::TASK_NOT_CANCELABLE,
                format!("task `{}` has already ended ({}); it cannot be canceled", p.id, d.state(r.state)),
            ));
        }
        Ok(Some(_)) => {}
        Err(e) => return internal(e),
    }
    match s.cancel(&p.id).await {
        Ok(Some(r)) => Answer::Result(d.task(&r, Vec::new())),
        Ok(None) => not_found(&p.id),
        Err(e) => internal(e),
    }
}

/// `SubscribeToTask` / `tasks/resubscribe`: the task as a client that saw every event so far
/// holds it (its artifacts folded from the replay ring up to the last frame id), then only
/// the events after that id. A client that lost its stream and applies A2A's append rules ends
/// with every chunk once.
pub async fn subscribe(s: &Session, d: Dialect, p: &params::TaskId, request_id: &Value) -> Answer {
    let record = match s.get_task(&p.id).await {
        Ok(Some(r)) => r,
        Ok(None) => return not_found(&p.id),
        Err(e) => return internal(e),
    };
    if record.state.is_final() {
        return Answer::Refused((
            code::UNSUPPORTED_OPERATION,
            format!("task `{}` has ended ({}); GetTask returns it", p.id, d.state(record.state)),
        ));
    }
    let last = match s.last_frame_id().await {
        Ok(n) => n,
        Err(e) => return internal(e),
    };
    let Some(mut rx) = s.subscribe(Some(0)).await else { return internal("the stream emitter is not running") };
    let mut events = TaskEvents::new(d, &record.id, &record.context_id);
    let mut folded = Folded::default();
    let mut gap = None;
    let mut ended = false;
    // Frames past `last` seen while folding (only when the ring moved on meanwhile): sent
    // right after the snapshot.
    let mut past = Vec::new();
    if last > 0 {
        loop {
            // Replayed frames are already queued: this reads the ring up to `last`, then stops.
            let Some(f) = rx.recv().await else { return internal("the capsule closed") };
            let id = f.id.unwrap_or(0);
            match (&f.frame, events.map(&f.frame)) {
                (Frame::Gap { first_available_id }, _) => gap = Some(*first_available_id),
                (_, Mapped::Event(e)) if id <= last => folded.apply(&e),
                (_, Mapped::Event(e)) => past.push(e),
                (_, Mapped::Final(e)) => {
                    if id > last {
                        past.push(e);
                    }
                    ended = true;
                }
                (_, Mapped::Nothing) => {}
            }
            if id >= last {
                break;
            }
        }
    }
    let mut snapshot = record.clone();
    if let Some((state, text)) = events.state.clone() {
        snapshot.state = state;
        snapshot.message = text;
        snapshot.response = None;
    }
    let mut task = d.task(&snapshot, folded.into_artifacts());
    if let Some(first) = gap {
        task["metadata"] = json!({"murmur": {"gap": {"firstAvailableId": first}}});
    }
    let mut lead = vec![d.task_event(task)];
    lead.extend(past);
    let plan = Plan { request_id: request_id.clone(), lead, ended: ended || snapshot.state.is_final(), events };
    Answer::Stream(stream::respond(plan, rx))
}
