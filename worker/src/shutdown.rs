//! What a shutdown did (runtime spec §12.5): every final write that lands once shutdown
//! began is counted by what it was, so [`Runtime::shutdown`](crate::Runtime::shutdown)
//! reports what happened to each execution instead of how many it interrupted.

use std::fmt;
use std::sync::atomic::{AtomicUsize, Ordering};

/// What [`Runtime::shutdown`](crate::Runtime::shutdown) did with the work it found. Running
/// out of grace is an ordinary outcome of a deploy, not an error: the counts say what
/// finished and what was requeued (at no cost: no counter and no `run_at` changed).
///
/// Every execution and every task claimed ahead that shutdown dealt with is counted once, by
/// the final write that landed for it (an ack handed to the batched completer before shutdown
/// and flushed by it counts as finished).
///
/// ```
/// # async fn demo(runtime: taskgate_worker::Runtime) -> taskgate_worker::Result<()> {
/// let report = runtime.shutdown(std::time::Duration::from_secs(30)).await?;
/// println!("{report}"); // shutdown: 3 finished, 1 interrupted and requeued (grace period elapsed)
/// if report.write_failed > 0 {
///     // those tasks run again once their leases expire
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ShutdownReport {
    /// Whether the grace period ran out with handlers still running (they were cancelled).
    pub grace_elapsed: bool,
    /// Executions whose outcome was written within the grace period: acked, failed, retried,
    /// cancelled or a step saved.
    pub finished: usize,
    /// Executions still running when the grace ran out whose own outcome was written
    /// afterwards: a handler that returned success when cancelled is acked (finished work is
    /// kept). A handler that blocks its thread cannot be cancelled or dropped: shutdown waits
    /// for it, and it is counted here once it returns.
    pub finished_after_grace: usize,
    /// Executions interrupted when the grace ran out and requeued to `pending` with no
    /// counter and no `run_at` changed (handlers dropped after the stop timeout included).
    pub requeued: usize,
    /// Tasks claimed ahead that no handler had started, requeued unchanged.
    pub held_requeued: usize,
    /// Executions whose lease was found lost: nothing was written, the reaper owns the task.
    pub lease_lost: usize,
    /// Final writes that failed on storage after their retries: those tasks stay `running`
    /// and run again once their leases expire.
    pub write_failed: usize,
}

impl fmt::Display for ShutdownReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "shutdown: {} finished", self.finished)?;
        let parts = [
            (self.finished_after_grace, "finished after the grace period"),
            (self.requeued, "interrupted and requeued"),
            (self.held_requeued, "claimed ahead and requeued"),
            (self.lease_lost, "found their lease lost"),
            (self.write_failed, "final write(s) failed (they run again after their leases)"),
        ];
        for (n, what) in parts.into_iter().filter(|(n, _)| *n > 0) {
            write!(f, ", {n} {what}")?;
        }
        if self.grace_elapsed {
            f.write_str(" (grace period elapsed)")?;
        }
        Ok(())
    }
}

/// How one execution or held task ended, as a shutdown counts it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Ended {
    /// Its own outcome was written; `after_grace` when the grace had run out first.
    Finished {
        /// The execution was interrupted before its outcome was written.
        after_grace: bool,
    },
    /// Interrupted and requeued.
    Requeued,
    /// Claimed ahead, never started, requeued.
    HeldRequeued,
    /// The lease was found lost.
    LeaseLost,
    /// The final write failed on storage.
    WriteFailed,
}

/// The counts of final writes that landed once shutdown began.
#[derive(Debug, Default)]
pub(crate) struct Tally {
    finished: AtomicUsize,
    finished_after_grace: AtomicUsize,
    requeued: AtomicUsize,
    held_requeued: AtomicUsize,
    lease_lost: AtomicUsize,
    write_failed: AtomicUsize,
}

impl Tally {
    /// Counts one ending.
    pub(crate) fn add(&self, ended: Ended, n: usize) {
        let counter = match ended {
            Ended::Finished { after_grace: false } => &self.finished,
            Ended::Finished { after_grace: true } => &self.finished_after_grace,
            Ended::Requeued => &self.requeued,
            Ended::HeldRequeued => &self.held_requeued,
            Ended::LeaseLost => &self.lease_lost,
            Ended::WriteFailed => &self.write_failed,
        };
        counter.fetch_add(n, Ordering::SeqCst);
    }

    /// The report so far.
    pub(crate) fn report(&self, grace_elapsed: bool) -> ShutdownReport {
        let get = |c: &AtomicUsize| c.load(Ordering::SeqCst);
        ShutdownReport {
            grace_elapsed,
            finished: get(&self.finished),
            finished_after_grace: get(&self.finished_after_grace),
            requeued: get(&self.requeued),
            held_requeued: get(&self.held_requeued),
            lease_lost: get(&self.lease_lost),
            write_failed: get(&self.write_failed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_counts_each_ending_and_says_only_what_happened() {
        let tally = Tally::default();
        tally.add(Ended::Finished { after_grace: false }, 3);
        assert_eq!(tally.report(false).to_string(), "shutdown: 3 finished");
        tally.add(Ended::Finished { after_grace: true }, 1);
        tally.add(Ended::Requeued, 2);
        tally.add(Ended::HeldRequeued, 5);
        tally.add(Ended::LeaseLost, 1);
        tally.add(Ended::WriteFailed, 1);
        let report = tally.report(true);
        assert_eq!(
            (report.finished, report.finished_after_grace, report.requeued),
            (3, 1, 2),
            "{report:?}"
        );
        assert_eq!((report.held_requeued, report.lease_lost, report.write_failed), (5, 1, 1));
        assert_eq!(
            report.to_string(),
            "shutdown: 3 finished, 1 finished after the grace period, 2 interrupted and \
             requeued, 5 claimed ahead and requeued, 1 found their lease lost, 1 final write(s) \
             failed (they run again after their leases) (grace period elapsed)"
        );
    }
}
