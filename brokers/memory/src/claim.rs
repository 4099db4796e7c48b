//! Claiming (contract §3.4 "Dequeue", §E8): pick ready tasks from the per-queue,
//! per-priority `(run_at, id)` indexes — O(levels × log n) per claim, paused queues skipped —
//! in `(priority, run_at, id)` order across the listed queues, and compute how long a waiting
//! claimer sleeps until the next delayed task is due.

use std::sync::Arc;
use std::time::Duration;

use taskgate::{id, Result, Status, Task, Timestamp};

use crate::txn::Txn;

impl Txn<'_> {
    /// Claims up to `max` ready tasks from `queues` in global `(priority, run_at, id)` order.
    pub(crate) fn claim(&mut self, queues: &[&str], max: usize) -> Result<Vec<Task>> {
        let mut claimed = Vec::with_capacity(max.min(self.claimable_len(queues)));
        let mut tokens = Tokens::default();
        while claimed.len() < max {
            let Some((_, run_at, slot)) = self.next_ready(queues) else { break };
            claimed.push(self.claim_one(slot, Timestamp::from_millis(run_at), &mut tokens)?);
        }
        Ok(claimed)
    }

    /// How many tasks of `queues` are pending or retrying (an upper bound for one claim).
    fn claimable_len(&self, queues: &[&str]) -> usize {
        let sets = queues.iter().filter_map(|q| self.state.index.claimable.get(*q));
        sets.map(|ready| ready.len).sum()
    }

    /// The first claim key `(priority, run_at, id)` due by now among the unpaused `queues`,
    /// as `(priority, run_at, slot)`. Within a level the head is the earliest, so a level
    /// whose head is not due has nothing due.
    fn next_ready(&self, queues: &[&str]) -> Option<(i16, i64, usize)> {
        let now = self.now.as_millis();
        let due = self.heads(queues).filter(|(_, (run_at, _), _)| *run_at <= now);
        due.min_by(|a, b| (a.0, a.1).cmp(&(b.0, b.1)))
            .map(|(p, (run_at, _), slot)| (p, *run_at, slot))
    }

    /// The first claim key of each priority level of each unpaused queue, with its slot.
    fn heads<'s>(
        &'s self,
        queues: &'s [&str],
    ) -> impl Iterator<Item = (i16, &'s (i64, Arc<str>), usize)> + 's {
        let state = &*self.state;
        queues
            .iter()
            .filter(|q| !state.paused.contains(**q))
            .filter_map(|q| state.index.claimable.get(*q))
            .flat_map(|ready| ready.heads())
    }

    /// Moves one ready task to `running` under a fresh lease and returns its snapshot.
    fn claim_one(&mut self, slot: usize, run_at: Timestamp, tokens: &mut Tokens) -> Result<Task> {
        let (now, opts) = (self.now, self.opts);
        let entry = self.move_slot(slot, Status::Running, run_at)?;
        // The token's buffer, cleared when the last lease ended, is reused.
        tokens.write(&mut entry.task.lease_token, slot);
        entry.lease_until = now.saturating_add(opts.ttl(&entry.task.queue)).as_millis();
        entry.task.started_at.get_or_insert(now);
        let snapshot = entry.task.clone();
        self.note_snapshot(&snapshot);
        Ok(snapshot)
    }

    /// Time until the earliest delayed task of the unpaused `queues` is due, if any.
    pub(crate) fn next_due(&self, queues: &[&str]) -> Option<Duration> {
        let now = self.now.as_millis();
        let due =
            self.heads(queues).map(|(_, (run_at, _), _)| *run_at).filter(|r| *r > now).min()?;
        Some(Timestamp::from_millis(due).duration_since(self.now))
    }
}

/// Length of a token's first part, the claim's ULID.
pub(crate) const TOKEN_BASE_LEN: usize = 26;

/// The lease tokens of one claim (contract §1.2.2, §3.4.8): the claim's own ULID, drawn once
/// from the process-wide generator, followed by the task's slot in decimal. Every claimed task
/// gets its own token (one claim never holds a slot twice), and no token repeats an earlier
/// one (the ULID is new and [`TOKEN_BASE_LEN`] characters long), for one draw per claim
/// instead of one per task. The slot lets token-checked calls find the entry without hashing
/// its ID ([`crate::tasks::Tasks::get_leased_mut`]); the token stays opaque to callers.
#[derive(Default)]
struct Tokens {
    /// The claim's ULID; empty until the first task is claimed.
    base: String,
}

impl Tokens {
    /// Replaces `out` with the token of the task in `slot` (reusing `out`'s buffer).
    fn write(&mut self, out: &mut String, slot: usize) {
        if self.base.is_empty() {
            id::write_ulid(&mut self.base);
        }
        out.clear();
        // Room for the ULID and any slot's digits: the buffer grows at most once.
        out.reserve(self.base.len() + 20);
        out.push_str(&self.base);
        push_decimal(out, slot);
    }
}

/// Appends `n` in decimal.
fn push_decimal(out: &mut String, n: usize) {
    if n >= 10 {
        push_decimal(out, n / 10);
    }
    out.push(char::from(b'0' + u8::try_from(n % 10).unwrap_or(0)));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_of_one_claim_differ_and_the_next_claim_draws_a_new_ulid() {
        let (mut first, mut second) = (Tokens::default(), Tokens::default());
        let mut seen = std::collections::HashSet::new();
        for tokens in [&mut first, &mut second] {
            for slot in 0..120 {
                let mut token = String::new();
                tokens.write(&mut token, slot);
                assert!(seen.insert(token));
            }
        }
        assert_ne!(first.base, second.base);
        assert_eq!(first.base.len(), TOKEN_BASE_LEN);
        let mut token = "a longer, older token".to_owned();
        first.write(&mut token, 1207);
        assert_eq!(token, format!("{}1207", first.base));
    }
}
