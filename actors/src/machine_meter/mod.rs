//! The host-wide spend meter (CONTRACT §8, `spend.machine_tokens_per_day`): one per process,
//! shared by every capsule's session meter ([`crate::spend::SpendMeter`]).
//!
//! What it guarantees: its mailbox is the one decision point for the host, so whatever the
//! interleaving of sessions, `settled + reserved` never passes the ceiling; a reservation is
//! granted only if `settled + reserved + tokens ≤ ceiling`, and a settlement never charges more
//! than its reservation. Today's spend survives restarts: each settlement is one line of the
//! day's ledger file ([`ledger`]), durable before it is acknowledged; at start the meter reads
//! today's file, ignores (and reports, [`MachineTotals::recovered`]) a torn last line and counts
//! each `(session, reservation)` once. The day is the UTC day of the injected [`Clock`]: at
//! midnight the settled total starts again from the new day's file, while reservations still
//! open carry over (they settle on the day they end).
//!
//! What it does not do: refuse by itself (it answers [`MachineMsg::Reserve`]; the session meter
//! refuses the call), survive a crash with reservations in flight (they are lost with the
//! process; their calls may have spent tokens that no line records), or share a ledger folder
//! between two processes (one host process owns it).

pub mod ledger;
#[cfg(test)]
mod tests;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::spend::{Limit, Refusal, ReservationId};
use ledger::{Job, Writer};
pub use ledger::{LedgerHealth, LedgerLine, Recovery, UtcDay};

/// The meter's clock (injectable so tests can cross midnight).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// The system clock.
pub fn system_clock() -> Clock {
    Arc::new(SystemTime::now)
}

/// Where the ledger lives, the ceiling and the clock.
#[derive(Clone)]
pub struct MachineArgs {
    /// The ledger folder (created if missing).
    pub dir: PathBuf,
    /// `spend.machine_tokens_per_day`; `None` records spend without a ceiling.
    pub tokens_per_day: Option<u64>,
    /// The clock.
    pub clock: Clock,
}

impl MachineArgs {
    /// With the system clock.
    pub fn new(dir: impl Into<PathBuf>, tokens_per_day: Option<u64>) -> Self {
        MachineArgs { dir: dir.into(), tokens_per_day, clock: system_clock() }
    }
}

/// Messages. Sessions are named by their id; reservation ids are the session meter's.
pub enum MachineMsg {
    /// Grant `tokens` to a call if the day's ceiling allows it.
    Reserve {
        /// Session id.
        session: Arc<str>,
        /// Reservation id.
        id: ReservationId,
        /// Estimated input + max output.
        tokens: u64,
        /// `Ok` when granted.
        reply: RpcReplyPort<Result<(), Refusal>>,
    },
    /// A granted reservation whose call was never sent: released, nothing charged.
    Release {
        /// Session id.
        session: Arc<str>,
        /// Reservation id.
        id: ReservationId,
    },
    /// A call ended: charge `input + output` (at most what was reserved) and write the line.
    Settle {
        /// Session id.
        session: Arc<str>,
        /// Reservation id.
        id: ReservationId,
        /// Input tokens charged.
        input: u64,
        /// Output tokens charged.
        output: u64,
        /// Answered `true` once the line is durable (fsync'd), `false` if writing failed.
        ack: Option<RpcReplyPort<bool>>,
    },
    /// A session meter restarted: its open reservations are charged in full (outcome unknown).
    Abandon {
        /// Session id.
        session: Arc<str>,
    },
    /// Today's figures.
    Totals(RpcReplyPort<MachineTotals>),
    /// Answered once every settlement before it is durable.
    Flush(RpcReplyPort<LedgerHealth>),
}

/// Today's figures.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MachineTotals {
    /// The UTC day (`YYYY-MM-DD`).
    pub day: String,
    /// The ceiling, if any.
    pub ceiling: Option<u64>,
    /// Tokens settled today.
    pub settled: u64,
    /// Tokens reserved by calls in flight.
    pub reserved: u64,
    /// Calls in flight.
    pub open: usize,
    /// Settlements counted today (including those read at start).
    pub settlements: u64,
    /// Reservations refused since start.
    pub refusals: u64,
    /// What reading the ledger found at start (or at the last day change).
    pub recovered: Recovery,
}

type Key = (Arc<str>, ReservationId);

/// State.
pub struct MachineState {
    dir: PathBuf,
    ceiling: Option<u64>,
    clock: Clock,
    day: UtcDay,
    settled: u64,
    reserved: u64,
    open: HashMap<Key, u64>,
    seen: HashSet<Key>,
    settlements: u64,
    refusals: u64,
    recovered: Recovery,
    writer: Writer,
}

impl MachineState {
    fn now_ms(&self) -> u64 {
        (self.clock)().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    /// Follow the clock into a new UTC day: the settled total is that day's file.
    fn roll(&mut self) -> std::io::Result<()> {
        let today = UtcDay::of((self.clock)());
        if today != self.day {
            let loaded = ledger::load(&self.dir, today)?;
            tracing::info!(from = %self.day, to = %today, settled = loaded.recovery.tokens, "spend: a new UTC day");
            self.day = today;
            self.settled = loaded.recovery.tokens;
            self.settlements = loaded.recovery.lines;
            self.seen = loaded.seen;
            self.recovered = loaded.recovery;
        }
        Ok(())
    }

    fn reserve(&mut self, key: Key, tokens: u64) -> Result<(), Refusal> {
        let used = self.settled.saturating_add(self.reserved);
        if let Some(ceiling) = self.ceiling
            && used.saturating_add(tokens) > ceiling
        {
            self.refusals += 1;
            return Err(Refusal { limit: Limit::Machine, ceiling, used, requested: tokens });
        }
        if let Some(old) = self.open.insert(key, tokens) {
            self.reserved -= old;
        }
        self.reserved += tokens;
        Ok(())
    }

    fn settle(&mut self, key: Key, input: u64, output: u64, abandoned: bool, ack: Option<RpcReplyPort<bool>>) {
        let reserved = self.open.remove(&key);
        if let Some(r) = reserved {
            self.reserved -= r;
        }
        if !self.seen.insert(key.clone()) {
            tracing::warn!(session = %key.0, reservation = key.1, "spend: a reservation settled twice; counted once");
            if let Some(a) = ack {
                let _ = a.send(true);
            }
            return;
        }
        let (input, output) = match reserved {
            Some(r) => (input.min(r), output.min(r - input.min(r))),
            None => (input, output),
        };
        self.settled += input + output;
        self.settlements += 1;
        let line = LedgerLine {
            reservation: key.1,
            session: key.0.to_string(),
            tokens: input + output,
            input,
            output,
            ts: self.now_ms(),
            abandoned,
        };
        let mut bytes = serde_json::to_vec(&line).unwrap_or_default();
        bytes.push(b'\n');
        self.writer.send(Job::Line { day: self.day, bytes, ack });
    }

    fn totals(&self) -> MachineTotals {
        MachineTotals {
            day: self.day.to_string(),
            ceiling: self.ceiling,
            settled: self.settled,
            reserved: self.reserved,
            open: self.open.len(),
            settlements: self.settlements,
            refusals: self.refusals,
            recovered: self.recovered.clone(),
        }
    }
}

/// The actor.
pub struct MachineMeter;

impl Actor for MachineMeter {
    type Msg = MachineMsg;
    type State = MachineState;
    type Arguments = MachineArgs;

    async fn pre_start(
        &self,
        _myself: ActorRef<MachineMsg>,
        args: MachineArgs,
    ) -> Result<MachineState, ActorProcessingErr> {
        let day = UtcDay::of((args.clock)());
        let loaded = ledger::load(&args.dir, day)?;
        let r = &loaded.recovery;
        tracing::info!(dir = %args.dir.display(), day = %day, settled = r.tokens, lines = r.lines, torn_bytes = r.torn_bytes, corrupt = r.corrupt, duplicates = r.duplicates, "spend: machine meter started");
        Ok(MachineState {
            writer: Writer::spawn(args.dir.clone())?,
            dir: args.dir,
            ceiling: args.tokens_per_day,
            clock: args.clock,
            day,
            settled: loaded.recovery.tokens,
            reserved: 0,
            open: HashMap::new(),
            seen: loaded.seen,
            settlements: loaded.recovery.lines,
            refusals: 0,
            recovered: loaded.recovery,
        })
    }

    async fn handle(
        &self,
        _myself: ActorRef<MachineMsg>,
        msg: MachineMsg,
        state: &mut MachineState,
    ) -> Result<(), ActorProcessingErr> {
        if let Err(e) = state.roll() {
            // Keep the old day's figures rather than forget them: refusing too much is safe.
            tracing::error!(error = %e, "spend: cannot read the new day's ledger; keeping the previous total");
        }
        match msg {
            MachineMsg::Reserve { session, id, tokens, reply } => {
                let _ = reply.send(state.reserve((session, id), tokens));
            }
            MachineMsg::Release { session, id } => {
                if let Some(r) = state.open.remove(&(session, id)) {
                    state.reserved -= r;
                }
            }
            MachineMsg::Settle { session, id, input, output, ack } => {
                state.settle((session, id), input, output, false, ack)
            }
            MachineMsg::Abandon { session } => {
                let keys: Vec<(Key, u64)> =
                    state.open.iter().filter(|(k, _)| k.0 == session).map(|(k, t)| (k.clone(), *t)).collect();
                for (key, tokens) in keys {
                    tracing::warn!(session = %key.0, reservation = key.1, tokens, "spend: open reservation of a restarted session charged in full");
                    state.settle(key, tokens, 0, true, None);
                }
            }
            MachineMsg::Totals(reply) => {
                let _ = reply.send(state.totals());
            }
            MachineMsg::Flush(reply) => state.writer.send(Job::Flush(reply)),
        }
        Ok(())
    }
}
