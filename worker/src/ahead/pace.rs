//! How far ahead a queue claims: the workers' measured capacity (tasks they finish per second
//! when never kept waiting for a claim) times twice the measured claim time, at most the
//! queue's `prefetch`.

use std::time::Duration;

use crate::num::whole;

/// Bounds of the look-ahead window (twice the measured claim time).
const LOOKAHEAD: (f64, f64) = (0.002, 0.2);
/// The shortest time one task is taken to keep a worker busy (seconds).
const MIN_BUSY: f64 = 1e-7;

/// The measured capacity and claim time.
#[derive(Default)]
pub(crate) struct Pace {
    /// Tasks finished and busy nanoseconds at the last estimate.
    finished: u64,
    busy: u64,
    /// Tasks the workers finish per second when never kept waiting for a claim.
    rate: f64,
    /// Seconds one full claim took.
    claim: f64,
}

impl Pace {
    /// Tasks to hold ahead: what `workers` finish in two claim times, at most `cap`, from the
    /// totals of tasks finished and of the nanoseconds they kept a worker busy. Until a task
    /// finishes nothing is known, and an estimate stands while nothing finishes (a blocked
    /// handler says nothing yet).
    pub(crate) fn target(&mut self, finished: u64, busy: u64, workers: usize, cap: usize) -> usize {
        if cap == 0 {
            return 0;
        }
        let done = finished.saturating_sub(self.finished);
        if done > 0 {
            let secs = busy.saturating_sub(self.busy) as f64 / 1e9;
            let each = (secs / done as f64).max(MIN_BUSY);
            let rate = workers as f64 / each;
            self.rate = if self.rate == 0.0 { rate } else { 0.6 * self.rate + 0.4 * rate };
            self.finished = finished;
            self.busy = busy;
        }
        let window = (2.0 * self.claim).clamp(LOOKAHEAD.0, LOOKAHEAD.1);
        whole(self.rate * window).min(cap)
    }

    /// A full claim took `took`.
    pub(crate) fn claimed(&mut self, took: Duration) {
        let secs = took.as_secs_f64();
        self.claim = if self.claim == 0.0 { secs } else { 0.7 * self.claim + 0.3 * secs };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_follows_the_capacity_and_the_cap() {
        const MS: u64 = 1_000_000;
        let mut pace = Pace::default();
        pace.claimed(Duration::from_millis(5));
        // 1,000 finished, 0.1 ms each, one worker: 10,000/s × 10 ms window = 100.
        let t = pace.target(1_000, 100 * MS, 1, 512);
        assert!((99..=101).contains(&t), "{t}");
        assert_eq!(pace.target(1_000, 100 * MS, 1, 0), 0, "cap 0: never ahead");
        let mut slow = Pace::default();
        slow.claimed(Duration::from_millis(5));
        assert_eq!(slow.target(4, 1_000 * MS, 1, 512), 0, "4/s handlers hold nothing ahead");
        let mut many = Pace::default();
        many.claimed(Duration::from_millis(5));
        // 250 ms handlers on 400 workers: 1,600/s × 10 ms = 16.
        let t = many.target(4, 1_000 * MS, 400, 512);
        assert!((15..=16).contains(&t), "capacity counts every worker: {t}");
        let mut fast = Pace::default();
        fast.claimed(Duration::from_millis(20));
        assert_eq!(fast.target(1_000_000, 1_000 * MS, 1, 512), 512, "capped by prefetch");
    }

    #[test]
    fn one_at_a_time_claims_do_not_hide_fast_handlers() {
        // Claim-and-start cycles of 10 ms (a loaded machine) around 20 µs handlers: the
        // observed finish rate (100/s × 2 ms window) would hold nothing ahead.
        let mut pace = Pace::default();
        pace.claimed(Duration::from_micros(500));
        let t = pace.target(5, 100_000, 1, 512);
        assert!((99..=100).contains(&t), "50,000/s capacity × 2 ms: {t}");
        // Nothing finished since (the one worker blocks): the estimate stands.
        assert_eq!(pace.target(5, 100_000, 1, 512), t);
    }
}
