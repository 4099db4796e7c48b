//! Retention (§E16, decisions.md "Retention"): delete old finished tasks that nothing live
//! depends on; keyed chains only when asked and then whole; at most 1,000 per critical section.

use std::sync::Arc;

use taskgate::{Status, Timestamp};

use crate::state::{Entry, State};

/// Most tasks deleted in one critical section.
pub(crate) const PRUNE_BATCH: usize = 1_000;

/// The units still to look at, oldest first.
pub(crate) type Units = std::iter::Peekable<std::vec::IntoIter<Unit>>;

/// What goes together: one key-less task, or a key's whole chain.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Unit {
    /// A task without a business key.
    Task(Arc<str>),
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
        for entry in self.tasks.values() {
            let key = &entry.task.business_key;
            if key.is_empty() && self.prunable(entry, rules) {
                units.push((
                    entry.task.finished_at.unwrap_or_default(),
                    Unit::Task(entry.key.clone()),
                ));
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
            Unit::Task(id) => {
                let entry = self.tasks.get(id)?;
                (entry.task.business_key.is_empty() && self.prunable(entry, rules)).then_some(1)
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
            Unit::Task(id) => vec![id.clone()],
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
        self.index.remove(&entry.key, &entry.task);
        // "Replayed" means a stored execution replays it (as in SQL, contract §1.1): when the
        // replay goes, its target is free again; when the target goes, a stored replay still
        // holds the marker (for a task that later reuses the ID).
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
