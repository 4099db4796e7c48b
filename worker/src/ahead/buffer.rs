//! The held tasks of one queue: claimed, not started, kept in claim order, with what sizes the
//! next claim (free workers, the pace's target, the claims in flight) and the signal that wakes
//! the feeders when a claim is due.

use std::collections::VecDeque;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use taskgate::{Task, Timestamp};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio_util::sync::CancellationToken;

use super::pace::Pace;

/// The most tasks one claim asks for.
const MAX_CLAIM: usize = 1_000;

/// A claimed task waiting for a worker.
pub(crate) struct Held {
    pub(crate) task: Task,
    /// When its lease was last taken or renewed (runtime clock).
    pub(crate) renewed: Timestamp,
}

/// The claim-ahead state of one queue.
pub(crate) struct Ahead {
    state: Mutex<State>,
    /// The queue's worker slots (free ones size the next claim).
    slots: Arc<Semaphore>,
    workers: usize,
    prefetch: usize,
    /// Raised when the buffer shrinks, a worker frees its slot or a claim lands.
    demand: Notify,
    /// Tasks this queue's workers finished.
    finished: AtomicU64,
    /// Nanoseconds those tasks kept a worker busy (handler and final write).
    busy: AtomicU64,
}

#[derive(Default)]
struct State {
    buffer: VecDeque<Held>,
    /// Tasks asked for by claims in flight.
    inflight: usize,
    /// The last claim came back full: more is waiting.
    backlog: bool,
    pace: Pace,
}

impl Ahead {
    /// The buffer of a queue with these `slots`, `workers` and `prefetch` cap.
    pub(crate) fn new(slots: Arc<Semaphore>, workers: usize, prefetch: usize) -> Ahead {
        Ahead {
            state: Mutex::default(),
            slots,
            workers,
            prefetch,
            demand: Notify::new(),
            finished: AtomicU64::new(0),
            busy: AtomicU64::new(0),
        }
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every update is a few plain field writes: a poisoned state is still consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Tasks held here now.
    pub(crate) fn held(&self) -> usize {
        self.state().buffer.len()
    }

    /// How many tasks a claim should ask for now (0: none yet).
    fn want(&self, st: &mut State) -> usize {
        let free = self.slots.available_permits();
        let (finished, busy) =
            (self.finished.load(Ordering::Relaxed), self.busy.load(Ordering::Relaxed));
        let ahead = st.pace.target(finished, busy, self.workers, self.prefetch);
        let target = free + ahead;
        let have = st.buffer.len() + st.inflight;
        let need = target.saturating_sub(have);
        // Idle workers and nothing held: claim whatever is needed now. Otherwise wait until
        // half the target is missing, so claims stay large.
        let least = match st.buffer.is_empty() && free > 0 {
            true => 1,
            false => (target / 2).max(1),
        };
        match need >= least {
            true => need.min(MAX_CLAIM),
            false => 0,
        }
    }

    /// Wakes the feeders when a claim is due.
    pub(crate) fn poke(&self) {
        let due = {
            let mut st = self.state();
            self.want(&mut st) > 0
        };
        if due {
            self.demand.notify_waiters();
        }
    }

    /// Wakes the feeders: a worker freed its slot.
    pub(crate) fn freed(&self) {
        self.demand.notify_waiters();
    }

    /// Waits until a claim is due (feeder `n` > 0: and a backlog is known); reserves its size.
    /// `None` once `stop` fires.
    pub(crate) async fn reserve(&self, stop: &CancellationToken, n: usize) -> Option<usize> {
        loop {
            let mut notified = pin!(self.demand.notified());
            notified.as_mut().enable();
            {
                let mut st = self.state();
                if n == 0 || st.backlog {
                    let want = self.want(&mut st);
                    if want > 0 {
                        st.inflight += want;
                        return Some(want);
                    }
                }
            }
            tokio::select! {
                () = notified => {}
                () = stop.cancelled() => return None,
            }
        }
    }

    /// A claim of `want` came back with nothing (failed or stopped).
    pub(crate) fn release(&self, want: usize) {
        {
            let mut st = self.state();
            st.inflight = st.inflight.saturating_sub(want);
        }
        self.demand.notify_waiters();
    }

    /// A claim of `want` landed with `tasks` after `took`, their leases taken at `renewed`.
    pub(crate) fn land(&self, want: usize, tasks: Vec<Task>, took: Duration, renewed: Timestamp) {
        {
            let mut st = self.state();
            st.inflight = st.inflight.saturating_sub(want);
            let full = tasks.len() >= want;
            st.backlog = full;
            if full {
                st.pace.claimed(took);
            }
            for task in tasks {
                hold(&mut st.buffer, Held { task, renewed });
            }
        }
        self.demand.notify_waiters();
    }

    /// The best held task and a free worker slot for it; none once shutdown began
    /// (`stopping`), when nothing is held or no worker is free.
    pub(crate) fn start_one(&self, stopping: bool) -> Option<(Task, OwnedSemaphorePermit)> {
        let mut st = self.state();
        if stopping || st.buffer.is_empty() {
            return None;
        }
        let slot = self.slots.clone().try_acquire_owned().ok()?;
        st.buffer.pop_front().map(|held| (held.task, slot))
    }

    /// A worker finished a task that kept it busy `busy`; the next held task it runs (none
    /// once shutdown began).
    pub(crate) fn next(&self, busy: Duration, stopping: bool) -> Option<Task> {
        let nanos = u64::try_from(busy.as_nanos()).unwrap_or(u64::MAX);
        self.busy.fetch_add(nanos, Ordering::Relaxed);
        self.finished.fetch_add(1, Ordering::Relaxed);
        let next = match stopping {
            true => None,
            false => self.state().buffer.pop_front(),
        };
        next.map(|held| held.task)
    }

    /// Takes task `id` out of the buffer, when it is held here.
    pub(crate) fn take(&self, id: &str) -> Option<Held> {
        let mut st = self.state();
        let at = st.buffer.iter().position(|h| h.task.id == id)?;
        st.buffer.remove(at)
    }

    /// Takes out the held tasks whose lease was renewed `period` or longer before `now`.
    pub(crate) fn take_due(&self, now: Timestamp, period: Duration) -> VecDeque<Held> {
        let mut st = self.state();
        let (due, keep): (VecDeque<Held>, VecDeque<Held>) = std::mem::take(&mut st.buffer)
            .into_iter()
            .partition(|h| now.duration_since(h.renewed) >= period);
        st.buffer = keep;
        due
    }

    /// Puts `back` into the buffer, each in claim order.
    pub(crate) fn put_back(&self, back: Vec<Held>) {
        let mut st = self.state();
        for held in back {
            hold(&mut st.buffer, held);
        }
    }

    /// Takes out every held task.
    pub(crate) fn drain(&self) -> Vec<Held> {
        self.state().buffer.drain(..).collect()
    }
}

/// Puts `held` into the buffer in claim order ([`Task::claim_order`]). Two claims in flight
/// can land in either order (and the one that started later can hold the better tasks), so a
/// landing claim is merged, not appended: a worker always starts the best task held. Claims of
/// a backlog take later tasks than the ones held, so the common case is one comparison and a
/// push at the back.
fn hold(buffer: &mut VecDeque<Held>, held: Held) {
    let key = held.task.claim_order();
    match buffer.back() {
        Some(last) if last.task.claim_order() > key => {
            let at = buffer.partition_point(|h| h.task.claim_order() <= key);
            buffer.insert(at, held);
        }
        _ => buffer.push_back(held),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn landing_claims_merge_in_claim_order() {
        let held = |id: &str, priority: i16, run_at: i64| Held {
            task: Task {
                id: id.into(),
                priority,
                run_at: Timestamp::from_millis(run_at),
                ..Task::default()
            },
            renewed: Timestamp::ZERO,
        };
        let mut buffer = VecDeque::new();
        // A later claim lands first with the worse task; the earlier one brings the better
        // ones; a backlog claim appends; equal priority and time fall back to the id.
        for h in [
            held("late", 5, 10),
            held("plain", 0, 20),
            held("urgent", -5, 30),
            held("next", 5, 40),
            held("b", 0, 20),
            held("a", 0, 20),
        ] {
            hold(&mut buffer, h);
        }
        let ids: Vec<&str> = buffer.iter().map(|h| h.task.id.as_str()).collect();
        assert_eq!(ids, ["urgent", "a", "b", "plain", "late", "next"]);
    }
}
