//! The session spend meter (CONTRACT §8, `inference.max_session_tokens`): admits every driver
//! call before it is sent and settles it when it ends.
//!
//! Protocol: [`SpendMsg::Admit`] reserves `estimated input + max output`; it is refused when
//! `settled + reserved + request` would pass the session ceiling or, asked next, the host's
//! daily ceiling ([`crate::spend::machine`]). A refused call must not be sent. When the call
//! ends, [`SpendMsg::Settle`] charges the measured totals (never more than was reserved; the
//! excess is counted in [`SpendTotals::overrun`] and logged), and [`SpendMsg::Fail`] charges a
//! failed or cancelled call its estimated input.
//!
//! Guarantees: this actor's mailbox serialises its session and the machine meter's serialises
//! the host; the session check and the machine reservation happen in one handler, so concurrent
//! calls cannot overshoot either ceiling. A session refusal latches: every later call (and so
//! every later task) is refused, the session stays up. A machine refusal does not latch: the next
//! call asks again. An unreachable machine meter refuses the call (fail closed). The totals live
//! in a [`SessionBook`] shared through the arguments, so a restarted meter keeps the session's
//! spend and latch; reservations open at a restart are charged in full (their outcome is
//! unknown), here and at the machine meter.
//!
//! Across processes: every reservation is written to the session's spend journal
//! (`<session>/spend.jsonl`) before its call is sent, and every settlement after it ends. A
//! `--resume` in a new process rebuilds the book from it: settled calls are counted, calls in
//! flight at the stop are charged in full (their outcome is unknown), and reservation ids
//! continue after the last one, so the ledger never sees an id twice.
//!
//! Not done here: estimating tokens ([`crate::spend::tokens`]), or writing the trace event (the loop
//! writes `spend_ceiling_reached` with [`Refusal::trace_fields`]).

#[cfg(test)]
mod tests;

pub mod cl100k;
pub mod machine;
mod spend_journal;
pub mod tokens;

use spend_journal::{SpendLine, rebuild};

use capsule_protocol::Code;
use capsule_protocol::neutral::Usage;
use ractor::rpc::CallResult;
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use crate::spend::machine::MachineMsg;

/// How long admission waits for the machine meter before refusing (fail closed).
pub const MACHINE_TIMEOUT: Duration = Duration::from_secs(5);

/// A reservation's id, unique within its session (also across restarts of the meter).
pub type ReservationId = u64;

/// Which ceiling refused a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// `inference.max_session_tokens`.
    Session,
    /// `spend.machine_tokens_per_day`.
    Machine,
    /// The machine meter did not answer; traced as `machine`.
    #[serde(rename = "machine")]
    MachineUnavailable,
}

impl Limit {
    /// The `limit` field of the trace event.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Session => "session",
            Limit::Machine | Limit::MachineUnavailable => "machine",
        }
    }

    /// The setting that sets this ceiling.
    pub fn setting(self) -> &'static str {
        match self {
            Limit::Session => "inference.max_session_tokens",
            Limit::Machine | Limit::MachineUnavailable => "spend.machine_tokens_per_day",
        }
    }

    /// The diagnostic code.
    pub fn code(self) -> &'static str {
        match self {
            Limit::Session => Code::SessionCeiling.as_str(),
            Limit::Machine | Limit::MachineUnavailable => Code::MachineCeiling.as_str(),
        }
    }
}

/// A refused call: which ceiling, its value, what was used (settled + reserved) and asked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Refusal {
    /// The ceiling that refused.
    pub limit: Limit,
    /// Its value in tokens.
    pub ceiling: u64,
    /// Settled + reserved when refused.
    pub used: u64,
    /// This call's estimated input + max output.
    pub requested: u64,
}

impl Refusal {
    /// `E-RUN-080` (session) or `E-RUN-081` (machine).
    pub fn code(&self) -> &'static str {
        self.limit.code()
    }

    /// The fields of the `spend_ceiling_reached` trace event.
    pub fn trace_fields(&self) -> serde_json::Value {
        serde_json::json!({"limit": self.limit.as_str(), "ceiling": self.ceiling, "used": self.used, "requested": self.requested, "code": self.code()})
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (code, setting, c, u, r) = (self.code(), self.limit.setting(), self.ceiling, self.used, self.requested);
        match self.limit {
            Limit::Session => write!(
                f,
                "{code}: the session spend ceiling {setting} ({c} tokens) is reached: {u} used, this call needs {r}; the call was not sent and this session takes no more inference calls. Start a new session, or raise {setting} in murmur.yaml"
            ),
            Limit::Machine => write!(
                f,
                "{code}: the host's daily spend ceiling {setting} ({c} tokens per UTC day) is reached: {u} used today, this call needs {r}; the call was not sent. Retry after other calls settle or after 00:00 UTC, or raise {setting} in the host config"
            ),
            Limit::MachineUnavailable => {
                write!(
                    f,
                    "{code}: the host spend meter ({setting}) did not answer, so the call was not sent (spend is never unmetered); check the host's log and retry"
                )
            }
        }
    }
}

/// A granted reservation: settle it with its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Reservation {
    /// Id to settle with.
    pub id: ReservationId,
    /// Input reserved (the estimate; what a failed call is charged).
    pub estimated_input: u64,
    /// Output reserved (the call's output cap).
    pub max_output: u64,
}

impl Reservation {
    /// Tokens reserved.
    pub fn tokens(&self) -> u64 {
        self.estimated_input.saturating_add(self.max_output)
    }
}

/// What a session's spend meter is asked: admit a call before it is sent, settle or fail it
/// after, and its totals.
pub enum SpendMsg {
    /// Reserve `estimated_input + max_output` for a call, or refuse it.
    Admit {
        /// cl100k estimate of the request.
        estimated_input: u64,
        /// The call's output cap.
        max_output: u64,
        /// The reservation, or why the call must not be sent.
        reply: RpcReplyPort<Result<Reservation, Refusal>>,
    },
    /// A call ended: charge its measured totals (each capped at what was reserved).
    Settle {
        /// The reservation.
        reservation: ReservationId,
        /// Input tokens measured.
        input: u64,
        /// Output tokens measured.
        output: u64,
        /// Provider counts, recorded beside (`*_tokens_actual`), never charged.
        actual: Option<Usage>,
    },
    /// A call failed or was cancelled: charge its estimated input.
    Fail {
        /// The reservation.
        reservation: ReservationId,
        /// Provider counts, if any.
        actual: Option<Usage>,
    },
    /// The totals so far.
    Totals(RpcReplyPort<SpendTotals>),
}

/// The session's figures.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct SpendTotals {
    /// Calls ended (settled, failed or recorded).
    pub calls: u64,
    /// Sum of the estimated input of ended calls.
    pub estimated_input: u64,
    /// Sum of provider-reported input tokens.
    pub input_tokens_actual: u64,
    /// Sum of provider-reported output tokens.
    pub output_tokens_actual: u64,
    /// `inference.max_session_tokens`, if any.
    pub ceiling: Option<u64>,
    /// Tokens charged.
    pub settled: u64,
    /// Tokens reserved by calls in flight.
    pub reserved: u64,
    /// Calls in flight.
    pub open: u64,
    /// Calls admitted.
    pub admitted: u64,
    /// Calls refused.
    pub refused: u64,
    /// Measured tokens above a call's reservation (not charged; a too-low estimate).
    pub overrun: u64,
    /// The session refusal, once latched.
    pub latched: Option<Refusal>,
}

#[derive(Default)]
struct Book {
    totals: SpendTotals,
    open: HashMap<ReservationId, Reservation>,
    next_id: ReservationId,
    /// Whether the session's spend journal was read (once per process).
    loaded: bool,
}

/// The session's spend, shared by every incarnation of its meter (clone it into the args).
#[derive(Clone, Default)]
pub struct SessionBook(Arc<Mutex<Book>>);

impl SessionBook {
    fn lock(&self) -> MutexGuard<'_, Book> {
        self.0.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// What the meter is started (and restarted) with.
#[derive(Clone)]
pub struct SpendArgs {
    /// Session id (names the session in the ledger).
    pub session_id: String,
    /// `inference.max_session_tokens`.
    pub session_ceiling: Option<u64>,
    /// The host's machine meter, when `spend.machine_tokens_per_day` is configured.
    pub machine: Option<ActorRef<MachineMsg>>,
    /// The session's spend (survives a restart of the meter).
    pub book: SessionBook,
    /// The session's spend journal (`<session>/spend.jsonl`): every reservation is written
    /// before its call is sent and every settlement after it ends, so a `--resume` in another
    /// process rebuilds the book and never reuses a reservation id.
    pub journal: Option<std::path::PathBuf>,
}

impl SpendArgs {
    /// Arguments with a fresh book.
    pub fn new(
        session_id: impl Into<String>,
        session_ceiling: Option<u64>,
        machine: Option<ActorRef<MachineMsg>>,
    ) -> Self {
        SpendArgs {
            session_id: session_id.into(),
            session_ceiling,
            machine,
            book: SessionBook::default(),
            journal: None,
        }
    }
}

/// The meter's state: the session book (shared with its next incarnation), its journal and the
/// machine meter it also asks.
pub struct SpendState {
    session: Arc<str>,
    ceiling: Option<u64>,
    machine: Option<ActorRef<MachineMsg>>,
    book: SessionBook,
    journal: Option<crate::journal_check::SealedFile>,
}

/// A session's spend meter: admission before every driver call, settlement after (CONTRACT §8).
pub struct SpendMeter;

fn record_actual(t: &mut SpendTotals, actual: Option<Usage>) {
    if let Some(u) = actual {
        t.input_tokens_actual += u.input_tokens;
        t.output_tokens_actual += u.output_tokens;
    }
}

impl SpendState {
    async fn admit(&mut self, estimated_input: u64, max_output: u64) -> Result<Reservation, Refusal> {
        let requested = estimated_input.saturating_add(max_output);
        let id = {
            let mut book = self.book.lock();
            let t = &mut book.totals;
            let used = t.settled + t.reserved;
            if let Some(latched) = t.latched {
                t.refused += 1;
                return Err(Refusal { used, requested, ..latched });
            }
            if let Some(ceiling) = self.ceiling
                && used.saturating_add(requested) > ceiling
            {
                let refusal = Refusal { limit: Limit::Session, ceiling, used, requested };
                t.refused += 1;
                t.latched = Some(refusal);
                tracing::warn!(session = %self.session, ceiling, used, requested, "spend: session ceiling reached; latched");
                return Err(refusal);
            }
            book.next_id += 1;
            book.next_id
        };
        if let Some(m) = &self.machine {
            let session = self.session.clone();
            let asked = m
                .call(|reply| MachineMsg::Reserve { session, id, tokens: requested, reply }, Some(MACHINE_TIMEOUT))
                .await;
            let refusal = match asked {
                Ok(CallResult::Success(Ok(()))) => None,
                Ok(CallResult::Success(Err(refusal))) => Some(refusal),
                _ => {
                    // It may still grant it later: release so nothing stays reserved.
                    let _ = m.cast(MachineMsg::Release { session: self.session.clone(), id });
                    tracing::error!(session = %self.session, "spend: the machine meter did not answer; call refused");
                    Some(Refusal { limit: Limit::MachineUnavailable, ceiling: 0, used: 0, requested })
                }
            };
            if let Some(r) = refusal {
                self.book.lock().totals.refused += 1;
                return Err(r);
            }
        }
        let reservation = Reservation { id, estimated_input, max_output };
        self.write(SpendLine::Reserve { r: id, est: estimated_input, max: max_output });
        let mut book = self.book.lock();
        book.open.insert(id, reservation);
        book.totals.reserved += requested;
        book.totals.open += 1;
        book.totals.admitted += 1;
        Ok(reservation)
    }

    /// Charge a reservation `input + output`, each capped at what was reserved.
    fn settle(&mut self, id: ReservationId, input: u64, output: u64, actual: Option<Usage>) {
        let mut book = self.book.lock();
        let Some(r) = book.open.remove(&id) else {
            tracing::warn!(session = %self.session, reservation = id, "spend: settle of an unknown or already settled reservation ignored");
            return;
        };
        let (charged_in, charged_out) = (input.min(r.estimated_input), output.min(r.max_output));
        let t = &mut book.totals;
        let over = (input - charged_in) + (output - charged_out);
        if over > 0 {
            tracing::warn!(session = %self.session, reservation = id, over, "spend: measured tokens above the reservation (estimate too low); not charged");
        }
        t.overrun += over;
        t.reserved -= r.tokens();
        t.open -= 1;
        t.settled += charged_in + charged_out;
        t.calls += 1;
        t.estimated_input += r.estimated_input;
        record_actual(t, actual);
        drop(book);
        self.write(SpendLine::Settle { r: id, c: charged_in + charged_out });
        if let Some(m) = &self.machine {
            let _ = m.cast(MachineMsg::Settle {
                session: self.session.clone(),
                id,
                input: charged_in,
                output: charged_out,
                ack: None,
            });
        }
    }
}

impl Actor for SpendMeter {
    type Msg = SpendMsg;
    type State = SpendState;
    type Arguments = SpendArgs;

    async fn pre_start(&self, _myself: ActorRef<SpendMsg>, args: SpendArgs) -> Result<SpendState, ActorProcessingErr> {
        let session: Arc<str> = Arc::from(args.session_id.as_str());
        let mut journal = match &args.journal {
            Some(p) => Some(crate::journal_check::SealedFile::open(p)?),
            None => None,
        };
        let mut book = args.book.lock();
        book.totals.ceiling = args.session_ceiling;
        if !book.loaded {
            book.loaded = true;
            if let Some(p) = &args.journal {
                let records = crate::emitter::journal_records(p);
                let charged = rebuild(&mut book, &records);
                if !charged.is_empty() {
                    tracing::warn!(session = %session, calls = charged.len(), "spend: resumed with calls that were in flight when the process stopped; charged in full");
                }
                if let Some(f) = &mut journal {
                    for (r, c) in charged {
                        f.append(serde_json::to_vec(&SpendLine::Settle { r, c }).unwrap_or_default())?;
                    }
                }
            }
        }
        let open: Vec<Reservation> = book.open.drain().map(|(_, r)| r).collect();
        for r in &open {
            let t = &mut book.totals;
            t.reserved -= r.tokens();
            t.open -= 1;
            t.settled += r.tokens();
            t.calls += 1;
            t.estimated_input += r.estimated_input;
        }
        drop(book);
        if let Some(f) = &mut journal {
            for r in &open {
                f.append(serde_json::to_vec(&SpendLine::Settle { r: r.id, c: r.tokens() }).unwrap_or_default())?;
            }
        }
        if !open.is_empty() {
            tracing::warn!(session = %session, calls = open.len(), "spend: meter restarted with calls in flight; charged in full");
            if let Some(m) = &args.machine {
                let _ = m.cast(MachineMsg::Abandon { session: session.clone() });
            }
        }
        Ok(SpendState { session, ceiling: args.session_ceiling, machine: args.machine, book: args.book, journal })
    }

    async fn handle(
        &self,
        _myself: ActorRef<SpendMsg>,
        msg: SpendMsg,
        state: &mut SpendState,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            SpendMsg::Admit { estimated_input, max_output, reply } => {
                let _ = reply.send(state.admit(estimated_input, max_output).await);
            }
            SpendMsg::Settle { reservation, input, output, actual } => state.settle(reservation, input, output, actual),
            SpendMsg::Fail { reservation, actual } => {
                let input = state.book.lock().open.get(&reservation).map_or(0, |r| r.estimated_input);
                state.settle(reservation, input, 0, actual);
            }
            SpendMsg::Totals(reply) => {
                let _ = reply.send(state.book.lock().totals);
            }
        }
        Ok(())
    }
}
