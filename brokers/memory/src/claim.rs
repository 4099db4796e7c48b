//! Claiming (contract §3.4 "Dequeue", §E8): pick ready tasks from the per-queue,
//! per-priority `(run_at, id)` indexes — O(levels × log n) per claim, paused queues skipped —
//! in `(priority, run_at, id)` order across the listed queues, and compute how long a waiting
//! claimer sleeps until the next delayed task is due.

use std::sync::Arc;
use std::time::Duration;

use taskgate::{id, transition, Error, Result, Status, Task, Timestamp};

use crate::state::{ClaimSet, Index};
use crate::txn::Txn;
use crate::NAME;

impl Txn<'_> {
    /// [`Txn::claim_into`] with a vector sized here.
    #[cfg(test)]
    pub(crate) fn claim(&mut self, queues: &[&str], max: usize) -> Result<Vec<Task>> {
        self.claim_into(queues, max, Vec::new())
    }

    /// Claims up to `max` ready tasks from `queues` in global `(priority, run_at, id)` order,
    /// appending them to `claimed`, which the caller may have allocated before taking the lock
    /// (with no capacity, it is sized here: at most the claimable tasks).
    ///
    /// Claims come in runs: [`Txn::pick`] finds the level holding the most urgent due head
    /// and the most urgent due head of every other level (the bound), and [`Txn::take_run`]
    /// takes from that level's front while its head stays due and ahead of the bound — the
    /// order one head-by-head pick per task would give, with one queue lookup per run instead
    /// of two per task.
    pub(crate) fn claim_into(
        &mut self,
        queues: &[&str],
        max: usize,
        mut claimed: Vec<Task>,
    ) -> Result<Vec<Task>> {
        let max = max.saturating_add(claimed.len());
        if claimed.capacity() == 0 {
            claimed.reserve(max.min(self.claimable_len(queues)));
        }
        let mut tokens = Tokens::default();
        while claimed.len() < max {
            let Some(pick) = self.pick(queues) else { break };
            let before = claimed.len();
            self.take_run(queues, &pick, max, &mut claimed, &mut tokens)?;
            if claimed.len() == before {
                // The picked head is due and ahead of the bound, so a run takes at least it.
                return Err(Error::backend(NAME, "a claim run took nothing"));
            }
        }
        Ok(claimed)
    }

    /// How many tasks of `queues` are pending or retrying (an upper bound for one claim).
    fn claimable_len(&self, queues: &[&str]) -> usize {
        let sets = queues.iter().filter_map(|q| self.state.index.claimable.get(*q));
        sets.map(|ready| ready.len).sum()
    }

    /// The level of the unpaused `queues` whose head is the first claim key
    /// `(priority, run_at, id)` due by now, and the first due head of all the other levels.
    /// Within a level the head is the earliest, so a level whose head is not due has nothing
    /// due. A queue listed twice is one set of levels.
    fn pick(&self, queues: &[&str]) -> Option<Pick> {
        let now = self.now.as_millis();
        let state = &*self.state;
        let mut best: Option<(Head<'_>, usize, &ClaimSet)> = None;
        let mut bound: Option<Head<'_>> = None;
        for (at, queue) in queues.iter().enumerate() {
            if state.paused.contains(*queue) {
                continue;
            }
            let Some(ready) = state.index.claimable.get(*queue) else { continue };
            for (priority, set) in &ready.levels {
                let Some(((run_at, id), _)) = set.first_key_value() else { continue };
                if *run_at > now || best.as_ref().is_some_and(|b| std::ptr::eq(b.2, set)) {
                    continue;
                }
                let head = (*priority, *run_at, &**id);
                match &best {
                    Some((first, ..)) if *first <= head => {
                        bound = bound.filter(|b| *b <= head).or(Some(head));
                    }
                    _ => {
                        bound = best.map(|(first, ..)| first);
                        best = Some((head, at, set));
                    }
                }
            }
        }
        let ((priority, ..), queue, _) = best?;
        let bound = bound.map(|(p, r, id)| (p, r, Arc::from(id)));
        Some(Pick { queue, priority, bound })
    }

    /// Claims from the level `pick` names, front first, while its head is due and sorts before
    /// the bound and fewer than `max` are claimed: each task moves to `running` under a fresh
    /// lease (as [`crate::txn`]'s `shift` would move it) and its snapshot joins `claimed`.
    fn take_run(
        &mut self,
        queues: &[&str],
        pick: &Pick,
        max: usize,
        claimed: &mut Vec<Task>,
        tokens: &mut Tokens,
    ) -> Result<()> {
        let (now, opts) = (self.now, self.opts);
        let state = &mut *self.state;
        let Index { claimable, running, .. } = &mut state.index;
        let queue = queues.get(pick.queue).copied().unwrap_or_default();
        let Some(ready) = claimable.get_mut(queue) else { return Ok(()) };
        let Some(level) = ready.levels.get_mut(&pick.priority) else { return Ok(()) };
        let ttl = opts.ttl(queue);
        let mut out = Ok(());
        while claimed.len() < max {
            let Some(((run_at, id), slot)) = level.first_key_value() else { break };
            let ahead =
                |(p, r, b): &(i16, i64, Arc<str>)| (pick.priority, *run_at, &**id) < (*p, *r, &**b);
            if *run_at > now.as_millis() || !pick.bound.as_ref().is_none_or(ahead) {
                break;
            }
            let slot = *slot;
            let Some(entry) = state.tasks.at_mut(slot) else {
                out = Err(Error::backend(NAME, "the claim index names an empty slot"));
                break;
            };
            if let Err(e) = transition(entry.task.status, Status::Running) {
                out = Err(e);
                break;
            }
            level.pop_first();
            ready.len -= 1;
            entry.task.status = Status::Running;
            running.insert(slot);
            entry.lease = Some(tokens.claim_id());
            entry.lease_until = now.saturating_add(ttl).as_millis();
            entry.task.started_at.get_or_insert(now);
            entry.task.last_heartbeat_at = None;
            let mut snapshot = entry.task.clone();
            tokens.write(&mut snapshot.lease_token, slot);
            snapshot.lease_expires_at = Some(Timestamp::from_millis(entry.lease_until));
            if let Some(notes) = self.notes.as_mut() {
                notes.push(snapshot.clone());
            }
            claimed.push(snapshot);
        }
        if level.is_empty() {
            ready.levels.remove(&pick.priority);
        }
        out
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

/// A claim's ULID, the first part of the tokens of every task it claimed.
pub(crate) type ClaimId = [u8; TOKEN_BASE_LEN];

/// The lease tokens of one claim (contract §1.2.2, §3.4.8): the claim's own ULID, drawn once
/// from the process-wide generator, followed by the task's slot in decimal. Every claimed task
/// gets its own token (one claim never holds a slot twice), and no token repeats an earlier
/// one (the ULID is new and [`TOKEN_BASE_LEN`] characters long), for one draw per claim
/// instead of one per task. The slot lets token-checked calls find the entry without hashing
/// its ID ([`crate::tasks::Tasks::get_leased_mut`]); the token stays opaque to callers. An
/// entry keeps only the ULID ([`crate::state::Entry::lease`]): its slot is the rest.
#[derive(Default)]
struct Tokens {
    /// The claim's ULID; empty until the first task is claimed.
    base: String,
    /// The same ULID as bytes, as entries keep it.
    id: ClaimId,
}

impl Tokens {
    /// The claim's ULID (drawn on the first call).
    fn claim_id(&mut self) -> ClaimId {
        if self.base.is_empty() {
            id::write_ulid(&mut self.base);
            for (to, from) in self.id.iter_mut().zip(self.base.bytes()) {
                *to = from;
            }
        }
        self.id
    }

    /// Replaces `out` with the token of the task in `slot` (call [`Tokens::claim_id`] first).
    fn write(&self, out: &mut String, slot: usize) {
        let (digits, from) = decimal(slot);
        let digits = digits.get(from..).unwrap_or_default();
        out.clear();
        out.reserve_exact(self.base.len() + digits.len());
        out.push_str(&self.base);
        digits.iter().for_each(|d| out.push(char::from(*d)));
    }
}

/// Replaces `out` with the token of the task in `slot` leased by `claim`.
pub(crate) fn push_token(out: &mut String, claim: &ClaimId, slot: usize) {
    let (digits, from) = decimal(slot);
    let digits = digits.get(from..).unwrap_or_default();
    out.clear();
    out.reserve_exact(TOKEN_BASE_LEN + digits.len());
    claim.iter().chain(digits).for_each(|b| out.push(char::from(*b)));
}

/// True when `token` is the token of the task in `slot` leased by `claim` (exactly: no other
/// spelling of the slot's number matches).
pub(crate) fn token_names(token: &str, claim: &ClaimId, slot: usize) -> bool {
    let (digits, from) = decimal(slot);
    let (base, rest) = token.as_bytes().split_at_checked(TOKEN_BASE_LEN).unwrap_or_default();
    base == claim.as_slice() && rest == digits.get(from..).unwrap_or_default()
}

/// `n` in decimal: the digits are `buffer[start..]`.
fn decimal(mut n: usize) -> ([u8; 20], usize) {
    let mut digits = [b'0'; 20];
    let mut from = digits.len();
    for digit in digits.iter_mut().rev() {
        *digit = b'0' + u8::try_from(n % 10).unwrap_or(0);
        from -= 1;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    (digits, from)
}

/// A claim key as [`Txn::pick`] compares them: `(priority, run_at, id)`.
type Head<'a> = (i16, i64, &'a str);

/// The level a claim run takes from: the queue (its index in the claim's list) and priority,
/// and the first due claim key of every other level, which the run must stay ahead of.
struct Pick {
    /// Index of the queue in the claim's queue list.
    queue: usize,
    /// The level's priority.
    priority: i16,
    /// The most urgent due head among the other levels, if any.
    bound: Option<(i16, i64, Arc<str>)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_of_one_claim_differ_and_the_next_claim_draws_a_new_ulid() {
        let (mut first, mut second) = (Tokens::default(), Tokens::default());
        let mut seen = std::collections::HashSet::new();
        for tokens in [&mut first, &mut second] {
            let claim = tokens.claim_id();
            for slot in 0..120 {
                let mut token = String::new();
                tokens.write(&mut token, slot);
                let mut spelled = String::new();
                push_token(&mut spelled, &claim, slot);
                assert_eq!(token, spelled);
                assert!(token_names(&token, &claim, slot));
                assert!(seen.insert(token));
            }
        }
        assert_ne!(first.base, second.base);
        assert_eq!(first.base.len(), TOKEN_BASE_LEN);
        let mut token = "a longer, older token".to_owned();
        first.write(&mut token, 1207);
        assert_eq!(token, format!("{}1207", first.base));
    }

    #[test]
    fn only_the_exact_spelling_names_a_lease() {
        let mut tokens = Tokens::default();
        let claim = tokens.claim_id();
        let ulid = tokens.base.clone();
        assert!(token_names(&format!("{ulid}0"), &claim, 0));
        assert!(token_names(&format!("{ulid}{}", usize::MAX), &claim, usize::MAX));
        let others =
            ["", "0", &ulid, &format!("{ulid}07"), &format!("{ulid}+7"), &format!("{ulid}70")];
        for other in others {
            assert!(!token_names(other, &claim, 7), "{other}");
        }
        let mut changed = format!("{ulid}7").into_bytes();
        changed[3] ^= 1;
        assert!(!token_names(&String::from_utf8(changed).unwrap_or_default(), &claim, 7));
    }
}
