//! One agent-loop inference call as the loop sends it: the wire view of the history for the
//! choice in use, admission before the call, settlement after; and the tool calls a reply
//! asks for.

use capsule_protocol::neutral::{Block, Message, ProducedBy};
use std::time::Duration;

use crate::error::InferenceError;
use crate::gateway::{GatewayMsg, InferReply};
use crate::peer::{Peer, PeerError, wait};
use crate::spend::SpendMsg;

/// The tool calls among a reply's blocks, in order: `(id, name, input)`.
/// A tool call of a turn, `(id, name, input)`: shared, so each step of the call takes it
/// without copying its input.
pub(crate) type TurnCall = std::sync::Arc<(String, String, serde_json::Value)>;

pub(crate) fn tool_calls(content: &[Block]) -> Vec<TurnCall> {
    content
        .iter()
        .filter_map(|b| match b {
            Block::ToolCall { id, name, input } => Some(std::sync::Arc::new((id.clone(), name.clone(), input.clone()))),
            _ => None,
        })
        .collect()
}

/// One agent-loop inference call: admission first (a refused call is never sent), then the
/// gateway, then settlement with the measured totals (a failed call is charged its input).
/// Settling here, not in the loop, means a call whose answer arrives after its task was
/// canceled is still charged.
pub(crate) async fn admitted_call(call: PlannedCall, retry: Retry) -> InferReply {
    let mut attempt = 0;
    let task_id = call.task_id.clone();
    loop {
        let reply = admitted_once(&call).await;
        let Some(delay) = retry.delay(attempt, &reply) else { return reply };
        attempt += 1;
        let status = reply.upstream.map(|u| u.status);
        let line = capsule_protocol::trace::TraceEvent::new(
            capsule_protocol::trace::TraceKind::InferenceRetry,
            &retry.session,
            crate::now_ms(),
            serde_json::json!({"task_id": task_id, "attempt": attempt, "of": retry.max, "status": status, "delay_ms": delay.as_millis() as u64, "error": reply.result.as_ref().err().map(ToString::to_string)}),
        );
        if let Err(e) = retry.journal.tell(crate::journal::JournalMsg::Trace(line)) {
            tracing::error!(session = retry.session, error = %e, "an inference_retry line was not written");
        }
        tokio::time::sleep(delay).await;
    }
}

/// When a call a provider answered 429 or 5xx is sent again: at most `max` times, after its
/// `retry-after` or `RETRY_BASE` doubling, never waiting more than `RETRY_MAX_WAIT` (a longer
/// `retry-after` ends the call with the provider's error).
#[derive(Debug, Clone)]
pub(crate) struct Retry {
    pub max: u32,
    pub journal: Peer,
    pub session: String,
}

/// The first retry's backoff when the provider gives no `retry-after`.
pub const RETRY_BASE: Duration = Duration::from_millis(500);
/// The longest wait before a retry.
pub const RETRY_MAX_WAIT: Duration = Duration::from_secs(60);

impl Retry {
    /// The wait before retrying `reply` after `attempt` retries, or `None` to return it.
    pub(crate) fn delay(&self, attempt: u32, reply: &InferReply) -> Option<Duration> {
        if attempt >= self.max || !matches!(reply.result, Err(InferenceError::Driver { .. })) {
            return None;
        }
        let upstream = reply.upstream?;
        if upstream.status != 429 && upstream.status < 500 {
            return None;
        }
        let wait = upstream.retry_after.unwrap_or(RETRY_BASE * 2u32.saturating_pow(attempt));
        (wait <= RETRY_MAX_WAIT).then_some(wait)
    }
}

/// One inference call as the loop planned it.
pub(crate) struct PlannedCall {
    /// The session's spend meter.
    pub spend: Peer,
    /// The driver's gateway.
    pub gateway: Peer,
    /// The driver artifact.
    pub artifact: String,
    /// The choice's driver config.
    pub config: Option<String>,
    /// The task it serves.
    pub task_id: String,
    /// The request (shared by the attempts of a retried call, never copied).
    pub request: std::sync::Arc<crate::wire::WireRequest>,
    /// The cl100k estimate of the request.
    pub estimate: u64,
    /// The call's output cap.
    pub max_output: u64,
    /// How long the gateway may take.
    pub timeout: Duration,
    /// Whether its progress reaches the event stream (agent-loop calls only).
    pub frames: bool,
    /// The task's `traceparent`, sent upstream.
    pub traceparent: Option<String>,
    /// Opened when the step before the call is journaled; nothing is sent before (`None`: that
    /// step was already journaled).
    pub gate: Option<capsule_runtime::SendGate>,
}

/// One admission, one gateway call, one settlement.
async fn admitted_once(call: &PlannedCall) -> InferReply {
    let PlannedCall {
        spend,
        gateway,
        artifact,
        config,
        task_id,
        request,
        estimate,
        max_output,
        timeout,
        frames,
        traceparent,
        gate,
    } = call;
    let frames = *frames;
    let (estimate, max_output, timeout) = (*estimate, *max_output, *timeout);
    let (task_id, request) = (task_id.clone(), request.clone());
    let fail = InferReply::failed;
    // A meter that cannot be asked refuses the call: admission never fails open.
    let unavailable = |e: PeerError| {
        tracing::error!(error = %e, "the spend meter did not answer; the call is refused");
        InferenceError::SpendRefused {
            refusal: crate::spend::Refusal {
                limit: crate::spend::Limit::MachineUnavailable,
                ceiling: 0,
                used: 0,
                requested: estimate + max_output,
            },
        }
    };
    let admit = |reply| SpendMsg::Admit { estimated_input: estimate, max_output, reply };
    let reservation = match spend.ask(admit, wait::CONTROL).await {
        Ok(Ok(r)) => r,
        Ok(Err(refusal)) => return fail(InferenceError::SpendRefused { refusal }),
        Err(e) => return fail(unavailable(e)),
    };
    let infer = |reply| GatewayMsg::Infer {
        task_id,
        request,
        config: config.clone(),
        frames,
        traceparent: traceparent.clone(),
        gate: gate.clone(),
        reply,
    };
    // The call's deadline runs from when its request may leave: a wait for the journal (a
    // JetStream leader election, a lost server) is the journal's, never the call's.
    let asked = gateway.ask(infer, wait::UNTIL_DONE);
    let reply = match after_gate(asked, gate.clone(), timeout).await {
        Ok(Ok(r)) => r,
        Err(_elapsed) => {
            tracing::warn!(artifact, "the gateway did not answer the call in time");
            fail(InferenceError::GatewayDown { artifact: artifact.to_string() })
        }
        Ok(Err(e)) => {
            tracing::warn!(error = %e, artifact, "the gateway did not answer the call");
            fail(InferenceError::GatewayDown { artifact: artifact.to_string() })
        }
    };
    let settle = match &reply.result {
        Ok(resp) => SpendMsg::Settle {
            reservation: reservation.id,
            input: estimate,
            output: resp
                .usage
                .map(|u| u.output_tokens)
                .unwrap_or_else(|| crate::spend::tokens::count_json(&resp.content)),
            actual: resp.usage,
        },
        Err(_) => SpendMsg::Fail { reservation: reservation.id, actual: None },
    };
    if let Err(e) = spend.tell(settle) {
        // The meter's book keeps the reservation open; it is charged in full.
        tracing::error!(error = %e, "a settlement was not delivered; the call stays charged in full");
    }
    reply
}

/// `fut` bounded by `timeout`, counted from when `gate` opens (or is refused); without a gate,
/// from now.
async fn after_gate<T>(
    fut: impl std::future::Future<Output = T>,
    gate: Option<capsule_runtime::SendGate>,
    timeout: Duration,
) -> Result<T, tokio::time::error::Elapsed> {
    let mut fut = std::pin::pin!(fut);
    if let Some(mut gate) = gate {
        tokio::select! {
            out = &mut fut => return Ok(out),
            _ = gate.passed() => {}
        }
    }
    tokio::time::timeout(timeout, fut).await
}

/// What a driver choice is sent of a stored message: a `thinking` (or redacted thinking) block
/// goes only to the driver and model that produced it; the stored history is never edited.
pub(crate) fn wire_view(m: &Message, to: &ProducedBy) -> Message {
    match &m.produced_by {
        Some(p)
            if p != to
                && m.content.iter().any(|b| matches!(b, Block::Thinking { .. } | Block::RedactedThinking { .. })) =>
        {
            let mut v = m.clone();
            v.content.retain(|b| !matches!(b, Block::Thinking { .. } | Block::RedactedThinking { .. }));
            v
        }
        _ => m.clone(),
    }
}
