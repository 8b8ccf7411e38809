//! The host's restart policy for one capsule: how long to wait before restarting a crashed
//! capsule, and how many restarts in how long make it `failed` instead.
//!
//! Plain data and arithmetic, so the rules are tested without actors or clocks.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// Restarts of one capsule by its host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RestartPolicy {
    /// Restarts allowed within [`RestartPolicy::period`]; the crash after that many makes the
    /// capsule `failed`.
    pub max_restarts: usize,
    /// The intensity window.
    pub period: Duration,
    /// The wait before the first restart in a window; each further restart in the window waits
    /// twice as long as the one before.
    pub backoff_initial: Duration,
    /// The longest wait.
    pub backoff_max: Duration,
}

impl Default for RestartPolicy {
    /// 3 restarts in 60 s, waiting 100 ms, 200 ms, 400 ms … up to 5 s.
    fn default() -> Self {
        RestartPolicy {
            max_restarts: 3,
            period: Duration::from_secs(60),
            backoff_initial: Duration::from_millis(100),
            backoff_max: Duration::from_secs(5),
        }
    }
}

impl RestartPolicy {
    /// The wait before a restart when `earlier` restarts already happened in the window.
    pub fn backoff(&self, earlier: usize) -> Duration {
        let factor = 1u32.checked_shl(u32::try_from(earlier).unwrap_or(u32::MAX)).unwrap_or(u32::MAX);
        self.backoff_initial.saturating_mul(factor).min(self.backoff_max)
    }
}

/// The restarts of one capsule inside the policy's window.
#[derive(Debug, Default, Clone)]
pub struct CrashWindow {
    restarts: VecDeque<Instant>,
}

impl CrashWindow {
    /// A crash at `now`: the wait before restarting, or `None` when the window already holds
    /// `max_restarts` restarts (the capsule is then `failed`). An admitted restart is recorded.
    pub fn admit(&mut self, now: Instant, policy: &RestartPolicy) -> Option<Duration> {
        while self.restarts.front().is_some_and(|t| now.duration_since(*t) > policy.period) {
            self.restarts.pop_front();
        }
        if self.restarts.len() >= policy.max_restarts {
            return None;
        }
        let wait = policy.backoff(self.restarts.len());
        self.restarts.push_back(now);
        Some(wait)
    }

    /// Forget every restart (an operator started the capsule again).
    pub fn clear(&mut self) {
        self.restarts.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_the_initial_wait_and_stops_at_the_cap() {
        let p = RestartPolicy::default();
        let waits: Vec<u128> = (0..8).map(|n| p.backoff(n).as_millis()).collect();
        assert_eq!(waits, [100, 200, 400, 800, 1600, 3200, 5000, 5000]);
        assert_eq!(p.backoff(usize::MAX), p.backoff_max);
    }

    #[test]
    fn the_crash_after_max_restarts_in_the_period_is_refused_and_old_restarts_expire() {
        let p = RestartPolicy::default();
        let mut w = CrashWindow::default();
        let t0 = Instant::now();
        assert_eq!(w.admit(t0, &p), Some(Duration::from_millis(100)));
        assert_eq!(w.admit(t0 + Duration::from_secs(1), &p), Some(Duration::from_millis(200)));
        assert_eq!(w.admit(t0 + Duration::from_secs(2), &p), Some(Duration::from_millis(400)));
        assert_eq!(w.admit(t0 + Duration::from_secs(3), &p), None, "a fourth crash within 60 s fails the capsule");
        assert_eq!(
            w.admit(t0 + Duration::from_secs(61), &p),
            Some(Duration::from_millis(400)),
            "the first restart left the window; two remain"
        );
        assert_eq!(w.admit(t0 + Duration::from_secs(61), &p), None, "three in the window again");
        w.clear();
        assert_eq!(w.admit(t0 + Duration::from_secs(62), &p), Some(Duration::from_millis(100)));
    }
}
