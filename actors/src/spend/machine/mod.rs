//! The host-wide spend meter (CONTRACT §8, `spend.machine_tokens_per_day`): one per process,
//! shared by every capsule's session meter ([`crate::spend::SpendMeter`]), and consistent with
//! every other process that uses the same ledger folder.
//!
//! What it guarantees: every decision is made under the ledger folder's OS lock, after reading
//! what every process on the machine reserved and settled ([`shared`]), so whatever the
//! interleaving of sessions and processes, `settled + reserved` never passes the ceiling; a
//! reservation is granted only if `settled + reserved + tokens ≤ ceiling`, and a settlement
//! never charges more than its reservation. Reservations are lines of the day's file too, so
//! other processes see them; a reservation whose process died is charged in full by the next
//! process to take the lock. Each settlement is durable before it is acknowledged. The day is
//! the UTC day of the injected [`Clock`]: at midnight the settled total starts again from the
//! new day's file, while reservations still open carry over (they settle on the day they end).
//!
//! What it does not do: refuse by itself (it answers [`MachineMsg::Reserve`]; the session meter
//! refuses the call).

pub mod ledger;
mod shared;
#[cfg(test)]
mod tests;

use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::spend::{Limit, Refusal, ReservationId};
use ledger::{Job, Writer};
pub use ledger::{LedgerHealth, LedgerLine, Recovery, UtcDay};
use shared::{Key, SharedLedger};

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
    /// On a clustered host: the ceiling is the cluster's, kept in KV (this process's ledger
    /// still records its own calls).
    pub cluster: Option<crate::cluster::ClusterSpend>,
}

impl MachineArgs {
    /// With the system clock.
    pub fn new(dir: impl Into<PathBuf>, tokens_per_day: Option<u64>) -> Self {
        MachineArgs { dir: dir.into(), tokens_per_day, clock: system_clock(), cluster: None }
    }
}

/// What the machine meter is asked: reserve, release, settle, abandon a session's calls, its
/// totals and a flush. Sessions are named by their id; reservation ids are the session meter's.
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

/// The machine meter's view of the shared ledger: what every process reserved and settled
/// today, and this process's open reservations.
pub struct MachineState {
    ceiling: Option<u64>,
    clock: Clock,
    ledger: SharedLedger,
    refusals: u64,
    recovered: Recovery,
    writer: Writer,
    cluster: Option<crate::cluster::ClusterSpend>,
    /// The UTC day each open cluster reservation was counted on (it settles there).
    cluster_days: std::collections::HashMap<Key, String>,
    /// This meter's name in the cluster's reservation ids (random per start: two hosts' process
    /// ids may be the same).
    cluster_meter: String,
}

impl MachineState {
    fn now_ms(&self) -> u64 {
        (self.clock)().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
    }

    /// Follow the clock into a new UTC day: the settled total is that day's file.
    fn roll(&mut self) -> std::io::Result<()> {
        let today = UtcDay::of((self.clock)());
        if today != self.ledger.day {
            let from = self.ledger.day;
            self.ledger.roll(today)?;
            tracing::info!(from = %from, to = %today, settled = self.ledger.settled, "spend: a new UTC day");
            self.recovered = self.ledger.recovery.clone();
        }
        Ok(())
    }

    fn reserve(&mut self, key: Key, tokens: u64) -> Result<(), Refusal> {
        let (ceiling, ts) = (self.ceiling, self.now_ms());
        let decided = self.ledger.locked(|l| {
            let used = l.settled.saturating_add(l.reserved());
            if let Some(ceiling) = ceiling
                && used.saturating_add(tokens) > ceiling
            {
                return Ok(Err(Refusal { limit: Limit::Machine, ceiling, used, requested: tokens }));
            }
            l.reserve_line(key, tokens, ts)?;
            Ok(Ok(()))
        });
        match decided {
            Ok(Ok(())) => Ok(()),
            Ok(Err(refusal)) => {
                self.refusals += 1;
                Err(refusal)
            }
            Err(e) => {
                // Fail closed: a reservation no other process can see must not be granted.
                tracing::error!(error = %e, "spend: cannot use the ledger; call refused");
                self.refusals += 1;
                Err(Refusal {
                    limit: Limit::MachineUnavailable,
                    ceiling: ceiling.unwrap_or(0),
                    used: 0,
                    requested: tokens,
                })
            }
        }
    }

    /// The id of the reservation `key` in the cluster's day total.
    fn cluster_id(&self, key: &Key) -> String {
        format!("{}/{}/{}", self.cluster_meter, key.0, key.1)
    }

    /// A reservation decided by the cluster's day total (compare-and-set in KV), then recorded
    /// in this process's ledger. A cluster that cannot be asked refuses the call.
    async fn reserve_in_cluster(
        &mut self,
        cluster: &crate::cluster::ClusterSpend,
        key: Key,
        tokens: u64,
    ) -> Result<(), Refusal> {
        let ceiling = self.ceiling.unwrap_or(u64::MAX);
        let day = UtcDay::of((self.clock)()).to_string();
        let refused = |limit, used| Refusal { limit, ceiling: self.ceiling.unwrap_or(0), used, requested: tokens };
        match cluster.reserve(&day, &self.cluster_id(&key), tokens, ceiling).await {
            Ok(Ok(())) => {}
            Ok(Err(used)) => {
                self.refusals += 1;
                return Err(refused(Limit::Machine, used));
            }
            Err(e) => {
                tracing::error!(error = %e, "spend: the cluster's day total cannot be changed; call refused");
                self.refusals += 1;
                return Err(refused(Limit::MachineUnavailable, 0));
            }
        }
        let ts = self.now_ms();
        self.cluster_days.insert(key.clone(), day);
        if let Err(e) = self.ledger.locked(|l| l.reserve_line(key, tokens, ts)) {
            tracing::error!(error = %e, "spend: the local ledger did not record a reservation the cluster granted");
        }
        Ok(())
    }

    /// Settle in the cluster's day total what the reservation `key` spent (0 for a release).
    async fn cluster_settle(&mut self, key: &Key, spent: u64) {
        let Some(cluster) = self.cluster.clone() else { return };
        let Some(day) = self.cluster_days.remove(key) else { return };
        if let Err(e) = cluster.settle(&day, &self.cluster_id(key), spent).await {
            // The reservation stays counted in the cluster: refusing too much is safe.
            tracing::error!(error = %e, "spend: a settlement did not reach the cluster's day total");
        }
    }

    fn release(&mut self, key: Key) {
        if let Err(e) = self.ledger.locked(|l| l.release_line(key)) {
            tracing::error!(error = %e, "spend: cannot write a release to the ledger");
        }
    }

    fn settle(&mut self, key: Key, input: u64, output: u64, abandoned: bool, ack: Option<RpcReplyPort<bool>>) {
        let ts = self.now_ms();
        match self.ledger.locked(|l| l.settle_line(key, input, output, abandoned, ts)) {
            Ok(false) => {
                if let Some(a) = ack {
                    let _ = a.send(true);
                }
            }
            Ok(true) => match self.ledger.file_handle() {
                Ok(file) => self.writer.send(Job::Sync { file, written: true, ack }),
                Err(e) => {
                    tracing::error!(error = %e, "spend: cannot sync the ledger");
                    if let Some(a) = ack {
                        let _ = a.send(false);
                    }
                }
            },
            Err(e) => {
                tracing::error!(error = %e, "spend: a settlement could not be written to the ledger");
                if let Some(a) = ack {
                    let _ = a.send(false);
                }
            }
        }
    }

    fn totals(&mut self) -> MachineTotals {
        if let Err(e) = self.ledger.locked(|_| Ok(())) {
            tracing::warn!(error = %e, "spend: cannot read the ledger; totals may be behind");
        }
        let mine = self.ledger.open.values().filter(|o| o.owner == self.ledger.me).count();
        MachineTotals {
            day: self.ledger.day.to_string(),
            ceiling: self.ceiling,
            settled: self.ledger.settled,
            reserved: self.ledger.reserved(),
            open: mine,
            settlements: self.ledger.settlements,
            refusals: self.refusals,
            recovered: self.recovered.clone(),
        }
    }
}

/// The machine meter of one process: decides admissions against the daily machine ceiling
/// under the ledger folder's lock, shared with every other process.
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
        let ledger = SharedLedger::open(&args.dir, day)?;
        let r = &ledger.recovery;
        tracing::info!(dir = %args.dir.display(), day = %day, settled = r.tokens, lines = r.lines, torn_bytes = r.torn_bytes, corrupt = r.corrupt, duplicates = r.duplicates, "spend: machine meter started");
        Ok(MachineState {
            writer: Writer::spawn()?,
            ceiling: args.tokens_per_day,
            clock: args.clock,
            recovered: ledger.recovery.clone(),
            ledger,
            refusals: 0,
            cluster: args.cluster,
            cluster_days: Default::default(),
            cluster_meter: uuid::Uuid::now_v7().simple().to_string(),
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
                let granted = match state.cluster.clone() {
                    None => state.reserve((session, id), tokens),
                    Some(c) => state.reserve_in_cluster(&c, (session, id), tokens).await,
                };
                let _ = reply.send(granted);
            }
            MachineMsg::Release { session, id } => {
                let key = (session, id);
                state.cluster_settle(&key, 0).await;
                state.release(key);
            }
            MachineMsg::Settle { session, id, input, output, ack } => {
                let key = (session, id);
                state.cluster_settle(&key, input.saturating_add(output)).await;
                state.settle(key, input, output, false, ack)
            }
            MachineMsg::Abandon { session } => {
                let me = state.ledger.me.clone();
                let keys: Vec<(Key, u64)> = state
                    .ledger
                    .open
                    .iter()
                    .filter(|(k, o)| k.0 == session && o.owner == me)
                    .map(|(k, o)| (k.clone(), o.tokens))
                    .collect();
                for (key, tokens) in keys {
                    tracing::warn!(session = %key.0, reservation = key.1, tokens, "spend: open reservation of a restarted session charged in full");
                    state.cluster_settle(&key, tokens).await;
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
