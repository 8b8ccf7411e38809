//! A timer that is always due within a second, so that arming a longer timeout does not wake
//! a parked worker.
//!
//! tokio's time driver wakes the thread parked on it whenever a new timer is due before the
//! earliest one it planned to wake for (so it can shorten its sleep). With no timer pending,
//! every new timer does that: a turn arms about six timeouts (the journal's and the gateway's
//! asks, the call deadlines), each an `eventfd` write and a worker woken for nothing. With this
//! one-second tick pending, a timeout of more than a second or two never comes first, so
//! arming it wakes nobody. Its cost is one wake-up a second.

use std::time::Duration;

/// The tick.
pub const TIMER_FLOOR: Duration = Duration::from_secs(1);

/// Start the tick on the current tokio runtime, for as long as the runtime runs. Call once per
/// runtime (the `capsule` binary does at start).
pub fn spawn_timer_floor() -> tokio::task::JoinHandle<()> {
    tokio::spawn(async {
        let mut tick = tokio::time::interval(TIMER_FLOOR);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
        }
    })
}
