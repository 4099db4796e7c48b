//! The stored data of one in-memory store: tasks with their internal fields, and the indexes
//! that keep claiming, reaping and listing from scanning every task.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use taskgate::{Status, Task, Timestamp};

use crate::claim::{push_token, token_names, ClaimId};
use crate::hashing::IdBuild;
use crate::tasks::Tasks;

/// One dependency edge `(child, parent, done)`, kept on the child (contract §1.1).
#[derive(Debug, Clone)]
pub(crate) struct Edge {
    /// The parent's ID.
    pub(crate) parent: Arc<str>,
    /// Propagation from this parent already ran for this child.
    pub(crate) done: bool,
}

/// A stored task and the internal fields that never appear on [`Task`].
#[derive(Debug)]
pub(crate) struct Entry {
    /// The task's ID, shared with the map key and the indexes.
    pub(crate) key: Arc<str>,
    /// Where [`Tasks`] stores it (set when it is stored; the claim index names it).
    pub(crate) slot: usize,
    /// The task record as callers see it, but for the lease token: that stays empty here and
    /// [`Entry::snapshot`] spells it out from `lease` and `slot`.
    pub(crate) task: Task,
    /// The ULID of the claim that holds the current lease (the token's first part; the slot
    /// is the rest, see [`crate::claim`]); `None` when not running. Kept inline, so a claim
    /// allocates no token buffer on the entry.
    pub(crate) lease: Option<ClaimId>,
    /// Lease deadline in unix ms; 0 = none.
    pub(crate) lease_until: i64,
    /// Distinct parents not yet satisfied.
    pub(crate) pending_parents: u32,
    /// One edge per distinct parent, in `depends_on` order.
    pub(crate) parents: Vec<Edge>,
    /// The distinct children that depend on this task, sorted by ID (propagation visits them
    /// in that order, like the SQL backends' `ORDER BY child_id`).
    pub(crate) children: Vec<Arc<str>>,
}

impl Entry {
    /// Adds `child` to the sorted children unless it is there already.
    pub(crate) fn link_child(&mut self, child: &Arc<str>) {
        if let Err(at) = self.children.binary_search(child) {
            self.children.insert(at, child.clone());
        }
    }

    /// Clears the lease: no token, no deadline, no heartbeat.
    pub(crate) fn release_lease(&mut self) {
        self.lease = None;
        self.lease_until = 0;
        self.task.last_heartbeat_at = None;
    }

    /// A deep copy of the task as callers see it, with its lease token, deadline and last
    /// heartbeat while running.
    pub(crate) fn snapshot(&self) -> Task {
        let mut task = self.task.clone();
        if let Some(claim) = &self.lease {
            push_token(&mut task.lease_token, claim, self.slot);
            task.lease_expires_at = Some(Timestamp::from_millis(self.lease_until));
        } else {
            task.last_heartbeat_at = None;
        }
        task
    }

    /// True when `token` is the token of the current lease.
    pub(crate) fn holds_lease(&self, token: &str) -> bool {
        self.lease.as_ref().is_some_and(|claim| token_names(token, claim, self.slot))
    }
}

/// Claim keys of one priority level of one queue: `(run_at ms, id)` of its pending and
/// retrying tasks, each with the task's slot in [`Tasks`].
pub(crate) type ClaimSet = BTreeMap<(i64, Arc<str>), usize>;

/// The claimable tasks of one queue: one [`ClaimSet`] per priority level that has any, so a
/// claim reads the head of each level (the most urgent due head wins) — O(levels × log n),
/// never past tasks that are not due yet.
#[derive(Debug, Default)]
pub(crate) struct ReadyQueue {
    /// Priority → that level's claim keys; empty levels are removed.
    pub(crate) levels: BTreeMap<i16, ClaimSet>,
    /// Tasks in all levels.
    pub(crate) len: usize,
}

impl ReadyQueue {
    /// The first claim key of each level and its task's slot, most urgent level first.
    pub(crate) fn heads(&self) -> impl Iterator<Item = (i16, &(i64, Arc<str>), usize)> + '_ {
        self.levels.iter().filter_map(|(p, set)| set.first_key_value().map(|(k, s)| (*p, k, *s)))
    }

    /// True when `(priority, run_at, key)` is indexed with `slot`.
    #[cfg(test)]
    pub(crate) fn contains(&self, priority: i16, run_at: i64, key: &Arc<str>, slot: usize) -> bool {
        let level = self.levels.get(&priority);
        level.and_then(|set| set.get(&(run_at, key.clone()))) == Some(&slot)
    }

    fn insert(&mut self, priority: i16, claim: (i64, Arc<str>), slot: usize) {
        if self.levels.entry(priority).or_default().insert(claim, slot).is_none() {
            self.len += 1;
        }
    }

    fn remove(&mut self, priority: i16, run_at: i64, key: &Arc<str>) {
        let Some(set) = self.levels.get_mut(&priority) else { return };
        // A claim takes the head: pop it without searching (or comparing text: the head's key
        // is this entry's own `Arc`).
        let head =
            set.first_key_value().is_some_and(|((r, k), _)| *r == run_at && Arc::ptr_eq(k, key));
        let removed = if head {
            set.pop_first().is_some()
        } else {
            set.remove(&(run_at, key.clone())).is_some()
        };
        if removed {
            self.len -= 1;
        }
        if set.is_empty() {
            self.levels.remove(&priority);
        }
    }
}

/// A set of slots of [`Tasks`] (numbers the store chose, never caller-controlled) as a dense
/// list plus each slot's position in it: adding and removing a slot are a few array writes
/// (no hashing), iteration is in no particular order.
#[derive(Debug, Default)]
pub(crate) struct SlotList {
    /// The slots in the set.
    slots: Vec<usize>,
    /// For every slot number seen, its position in `slots`, or [`SlotList::ABSENT`].
    at: Vec<usize>,
}

impl SlotList {
    /// The position of a slot not in the set.
    const ABSENT: usize = usize::MAX;

    /// Adds `slot`; false when it was there already.
    pub(crate) fn insert(&mut self, slot: usize) -> bool {
        if self.at.len() <= slot {
            self.at.resize(slot + 1, Self::ABSENT);
        }
        match self.at.get_mut(slot) {
            Some(at) if *at == Self::ABSENT => {
                *at = self.slots.len();
                self.slots.push(slot);
                true
            }
            _ => false,
        }
    }

    /// Removes `slot` (the last slot of the list takes its place); false when it was absent.
    pub(crate) fn remove(&mut self, slot: usize) -> bool {
        let Some(at) = self.at.get_mut(slot) else { return false };
        if *at == Self::ABSENT {
            return false;
        }
        let pos = std::mem::replace(at, Self::ABSENT);
        self.slots.swap_remove(pos);
        if let Some(moved) = self.slots.get(pos) {
            if let Some(at) = self.at.get_mut(*moved) {
                *at = pos;
            }
        }
        true
    }

    /// True when `slot` is in the set.
    #[cfg(test)]
    pub(crate) fn contains(&self, slot: usize) -> bool {
        self.at.get(slot).is_some_and(|at| *at != Self::ABSENT)
    }

    /// How many slots the set holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.slots.len()
    }

    /// The slots, in no particular order.
    pub(crate) fn iter(&self) -> std::slice::Iter<'_, usize> {
        self.slots.iter()
    }
}

/// The secondary indexes. Only [`Index::add`] and [`Index::remove`] touch them, always around
/// a status or `run_at` change (`txn::shift`, the one place that moves a task).
#[derive(Debug, Default)]
pub(crate) struct Index {
    /// Per queue, its claimable (pending/retrying) tasks ordered by `(priority, run_at, id)`.
    pub(crate) claimable: HashMap<String, ReadyQueue, IdBuild>,
    /// The slots of running tasks (the reaper's candidates; it sorts the expired ones by ID).
    pub(crate) running: SlotList,
    /// Blocked tasks by ID (defensive repair's candidates).
    pub(crate) blocked: BTreeSet<Arc<str>>,
}

impl Index {
    /// Indexes `task` (stored in `slot`) under its status; true when it became claimable.
    pub(crate) fn add(&mut self, key: &Arc<str>, slot: usize, task: &Task) -> bool {
        match task.status {
            Status::Pending | Status::Retrying => {
                let claim = (task.run_at.as_millis(), key.clone());
                match self.claimable.get_mut(task.queue.as_str()) {
                    Some(ready) => ready.insert(task.priority, claim, slot),
                    None => {
                        let mut ready = ReadyQueue::default();
                        ready.insert(task.priority, claim, slot);
                        self.claimable.insert(task.queue.clone(), ready);
                    }
                }
                true
            }
            Status::Running => {
                self.running.insert(slot);
                false
            }
            Status::Blocked => {
                self.blocked.insert(key.clone());
                false
            }
            Status::Completed | Status::Failed | Status::Canceled => false,
        }
    }

    /// Removes `task` (stored in `slot`) from the index of its current status.
    pub(crate) fn remove(&mut self, key: &Arc<str>, slot: usize, task: &Task) {
        match task.status {
            Status::Pending | Status::Retrying => {
                if let Some(ready) = self.claimable.get_mut(task.queue.as_str()) {
                    ready.remove(task.priority, task.run_at.as_millis(), key);
                }
            }
            Status::Running => {
                self.running.remove(slot);
            }
            Status::Blocked => {
                self.blocked.remove(key);
            }
            Status::Completed | Status::Failed | Status::Canceled => {}
        }
    }
}

/// Quota windows of one budget key (contract §9.5, memory form).
#[derive(Debug, Default)]
pub(crate) struct QuotaWindows {
    /// The budget's period in seconds (the last one a gate used).
    pub(crate) period: i64,
    /// Window start (unix seconds) → units used.
    pub(crate) used: BTreeMap<i64, u32>,
}

/// Everything one store holds, guarded by the store's mutex.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// Every task, by ID and by slot.
    pub(crate) tasks: Tasks,
    /// Claim, reap and repair indexes.
    pub(crate) index: Index,
    /// List order: `(created_at ms, id)` of every task.
    pub(crate) created: BTreeSet<(i64, Arc<str>)>,
    /// Business key → its executions in chain order (head first, tail last).
    pub(crate) chains: HashMap<String, Vec<Arc<str>>>,
    /// IDs that a stored execution names as its `replay_of` (the "already replayed" marker).
    pub(crate) replayed: HashSet<Arc<str>>,
    /// Paused queues (§E4).
    pub(crate) paused: BTreeSet<String>,
    /// Quota counters: key → windows.
    pub(crate) quota: HashMap<String, QuotaWindows>,
    /// Audit records of operator actions, oldest first (§E13).
    pub(crate) audit: Vec<taskgate::AuditRecord>,
}

impl State {
    /// The stored status of `id`, if it exists.
    pub(crate) fn status_of(&self, id: &str) -> Option<Status> {
        self.tasks.get(id).map(|e| e.task.status)
    }

    /// The chain tail of `key`, if the key has executions.
    pub(crate) fn chain_tail(&self, key: &str) -> Option<&Entry> {
        self.chains.get(key).and_then(|chain| chain.last()).and_then(|id| self.tasks.get(id))
    }

    /// Inserts a new entry and indexes it; true when it is claimable at once.
    pub(crate) fn insert(&mut self, entry: Entry) -> bool {
        let key = entry.key.clone();
        for edge in &entry.parents {
            if let Some(parent) = self.tasks.get_mut(&edge.parent) {
                parent.link_child(&key);
            }
        }
        if !entry.task.business_key.is_empty() {
            let chain = self.chains.entry(entry.task.business_key.clone()).or_default();
            chain.push(key.clone());
        }
        self.created.insert((entry.task.created_at.as_millis(), key));
        let entry = self.tasks.insert(entry);
        self.index.add(&entry.key, entry.slot, &entry.task)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_list_adds_removes_and_keeps_positions() {
        let mut list = SlotList::default();
        for slot in [5, 0, 9, 3] {
            assert!(list.insert(slot));
        }
        assert!(!list.insert(9));
        assert!(list.remove(5)); // the last slot (3) takes its place
        assert!(!list.remove(5));
        assert!(!list.remove(1000));
        assert!(list.remove(3));
        assert!(list.insert(5));
        let mut slots: Vec<usize> = list.iter().copied().collect();
        slots.sort_unstable();
        assert_eq!(slots, [0, 5, 9]);
        assert_eq!(list.len(), 3);
        assert!(list.contains(9) && list.contains(0) && !list.contains(3));
        for slot in [9, 0, 5] {
            assert!(list.remove(slot));
        }
        assert_eq!(list.len(), 0);
    }
}
