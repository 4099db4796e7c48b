//! Retention (§E16, decisions.md "Retention"): delete old finished tasks that nothing live
//! depends on; key-less replay chains whole; keyed chains only when asked and then whole; at
//! most 1,000 per critical section.

use std::collections::HashMap;
use std::sync::Arc;

use taskgate::{Status, Timestamp};

use crate::state::{Entry, State};

/// Most tasks deleted in one critical section.
pub(crate) const PRUNE_BATCH: usize = 1_000;

/// The units still to look at, oldest first.
pub(crate) type Units = std::iter::Peekable<std::vec::IntoIter<Unit>>;

/// What goes together: a key-less replay chain, or a key's whole chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Unit {
    /// A task without a business key and the executions replaying it, in chain order (most
    /// often the task alone).
    Replays(Vec<Arc<str>>),
    /// Every execution of a business key.
    Chain(String),
}

/// The rules one request applies.
pub(crate) struct Rules {
    /// Only tasks finished strictly before this.
    pub(crate) before: Timestamp,
    /// Only these statuses.
    pub(crate) statuses: Vec<Status>,
    /// Keyed chains may go.
    pub(crate) include_keyed: bool,
}

impl State {
    /// Every unit that qualifies now, oldest finish first.
    pub(crate) fn prune_units(&self, rules: &Rules) -> Vec<Unit> {
        let mut units: Vec<(Timestamp, Unit)> = Vec::new();
        let replayed_by: HashMap<&str, &Arc<str>> = self
            .tasks
            .values()
            .filter(|e| e.task.business_key.is_empty() && !e.task.replay_of.is_empty())
            .map(|e| (e.task.replay_of.as_str(), &e.key))
            .collect();
        for entry in self.tasks.values() {
            let t = &entry.task;
            // A chain starts at a task that replays no stored key-less task.
            let replays_stored = (self.tasks.get(t.replay_of.as_str()))
                .is_some_and(|target| target.task.business_key.is_empty());
            if !t.business_key.is_empty() || replays_stored {
                continue;
            }
            let mut chain = vec![entry.key.clone()];
            while let Some(next) = chain.last().and_then(|last| replayed_by.get(&**last)) {
                chain.push(Arc::clone(next));
            }
            if let Some(finished) = self.chain_prunable(&chain, rules) {
                units.push((finished, Unit::Replays(chain)));
            }
        }
        if rules.include_keyed {
            for (key, chain) in &self.chains {
                if let Some(finished) = self.chain_prunable(chain, rules) {
                    units.push((finished, Unit::Chain(key.clone())));
                }
            }
        }
        units.sort();
        units.into_iter().map(|(_, unit)| unit).collect()
    }

    /// How many tasks `unit` would delete now; `None` when it no longer qualifies.
    fn unit_size(&self, unit: &Unit, rules: &Rules) -> Option<usize> {
        match unit {
            Unit::Replays(chain) => {
                // Still whole: nobody replayed the tail meanwhile.
                let tail = chain.last()?;
                if self.replayed.contains(tail) {
                    return None;
                }
                self.chain_prunable(chain, rules).map(|_| chain.len())
            }
            Unit::Chain(key) => {
                let chain = self.chains.get(key)?;
                self.chain_prunable(chain, rules).map(|_| chain.len())
            }
        }
    }

    /// Deletes every task of `unit` (checked by [`State::unit_size`] first).
    fn delete_unit(&mut self, unit: &Unit) {
        let ids = match unit {
            Unit::Replays(chain) => chain.clone(),
            Unit::Chain(key) => self.chains.remove(key).unwrap_or_default(),
        };
        ids.iter().for_each(|id| self.delete(id));
    }

    /// Deletes qualifying units from the front of `units` until about [`PRUNE_BATCH`] tasks
    /// went (a chain is never split) or `left` would be crossed; returns how many went.
    pub(crate) fn prune_batch(&mut self, units: &mut Units, rules: &Rules, left: usize) -> usize {
        let mut deleted = 0;
        while let Some(unit) = units.peek() {
            let Some(size) = self.unit_size(unit, rules) else {
                units.next();
                continue;
            };
            if deleted > 0 && deleted + size > PRUNE_BATCH {
                break;
            }
            if size <= left - deleted {
                self.delete_unit(unit);
                deleted += size;
            }
            units.next();
        }
        deleted
    }

    /// True when `entry` is terminal, finished before the cutoff, of a pruned status, and no
    /// live task depends on it.
    fn prunable(&self, entry: &Entry, rules: &Rules) -> bool {
        let t = &entry.task;
        t.status.is_terminal()
            && t.finished_at.is_some_and(|f| f < rules.before)
            && rules.statuses.contains(&t.status)
            && entry.children.iter().all(|c| self.status_of(c).is_none_or(Status::is_terminal))
    }

    /// The latest finish of a chain whose every execution qualifies.
    fn chain_prunable(&self, chain: &[Arc<str>], rules: &Rules) -> Option<Timestamp> {
        let mut latest = Timestamp::ZERO;
        for id in chain {
            let entry = self.tasks.get(id)?;
            if !self.prunable(entry, rules) {
                return None;
            }
            latest = latest.max(entry.task.finished_at.unwrap_or_default());
        }
        Some(latest)
    }

    /// Removes one task with its edges, list entry and replay markers.
    fn delete(&mut self, id: &Arc<str>) {
        let Some(entry) = self.tasks.remove(id) else { return };
        self.created.remove(&(entry.task.created_at.as_millis(), entry.key.clone()));
        self.index.remove(&entry.key, entry.slot, &entry.task);
        // "Replayed" means a stored execution replays it (as in SQL, contract §1.1). Replay
        // chains go whole, so the marker goes with the chain.
        if !entry.task.replay_of.is_empty() {
            self.replayed.remove(entry.task.replay_of.as_str());
        }
        for edge in &entry.parents {
            if let Some(parent) = self.tasks.get_mut(&edge.parent) {
                parent.children.retain(|c| c != id);
            }
        }
        for child in &entry.children {
            if let Some(child) = self.tasks.get_mut(child) {
                child.parents.retain(|e| e.parent != *id);
            }
        }
    }

    /// Drops quota windows that ended more than one period before `now_secs`.
    pub(crate) fn prune_quota(&mut self, now_secs: i64) {
        for windows in self.quota.values_mut() {
            let period = windows.period;
            windows.used.retain(|win, _| win.saturating_add(period.saturating_mul(2)) >= now_secs);
        }
        self.quota.retain(|_, w| !w.used.is_empty());
    }
}
