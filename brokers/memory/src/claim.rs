//! Claiming (contract §3.4 "Dequeue", §E8): pick ready tasks from the per-queue
//! `(run_at, id)` indexes — O(log n) per claim, paused queues skipped — and compute how long
//! a waiting claimer sleeps until the next delayed task is due.

use std::sync::Arc;
use std::time::Duration;

use taskgate::{id, Result, Status, Task, Timestamp};

use crate::txn::Txn;

impl Txn<'_> {
    /// Claims up to `max` ready tasks from `queues` in global `(run_at, id)` order.
    pub(crate) fn claim(&mut self, queues: &[&str], max: usize) -> Result<Vec<Task>> {
        let mut claimed = Vec::with_capacity(max.min(self.claimable_len(queues)));
        while claimed.len() < max {
            let Some((run_at, key)) = self.next_ready(queues) else { break };
            claimed.push(self.claim_one(&key, Timestamp::from_millis(run_at))?);
        }
        Ok(claimed)
    }

    /// How many tasks of `queues` are pending or retrying (an upper bound for one claim).
    fn claimable_len(&self, queues: &[&str]) -> usize {
        let sets = queues.iter().filter_map(|q| self.state.index.claimable.get(*q));
        sets.map(|set| set.len()).sum()
    }

    /// The first claim key due by now among the unpaused `queues`.
    fn next_ready(&self, queues: &[&str]) -> Option<(i64, Arc<str>)> {
        let now = self.now.as_millis();
        self.heads(queues).filter(|(run_at, _)| *run_at <= now).min().cloned()
    }

    /// The first claim key of each unpaused queue.
    fn heads<'s>(&'s self, queues: &'s [&str]) -> impl Iterator<Item = &'s (i64, Arc<str>)> + 's {
        let state = &*self.state;
        queues
            .iter()
            .filter(|q| !state.paused.contains(**q))
            .filter_map(|q| state.index.claimable.get(*q)?.first())
    }

    /// Moves one ready task to `running` under a fresh lease and returns its snapshot.
    fn claim_one(&mut self, key: &str, run_at: Timestamp) -> Result<Task> {
        let (now, opts) = (self.now, self.opts);
        let entry = self.move_task(key, Status::Running, run_at)?;
        // The token's buffer, cleared when the last lease ended, is reused.
        id::write_ulid(&mut entry.task.lease_token);
        entry.lease_until = now.saturating_add(opts.ttl(&entry.task.queue)).as_millis();
        entry.task.started_at.get_or_insert(now);
        let snapshot = entry.task.clone();
        self.note(key);
        Ok(snapshot)
    }

    /// Time until the earliest delayed task of the unpaused `queues` is due, if any.
    pub(crate) fn next_due(&self, queues: &[&str]) -> Option<Duration> {
        let now = self.now.as_millis();
        let due = self.heads(queues).map(|(run_at, _)| *run_at).filter(|r| *r > now).min()?;
        Some(Timestamp::from_millis(due).duration_since(self.now))
    }
}
