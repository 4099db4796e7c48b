//! The task table: every stored entry in a slot of one vector, found by ID through a hash map
//! of slot numbers. The claim index names each ready task's slot, so a claim reaches its
//! entry without hashing the ID, and entries enqueued together sit next to each other (a
//! backlog is claimed in the order it was enqueued, so claims walk memory forwards).

use std::collections::HashMap;
use std::sync::Arc;

use crate::claim::TOKEN_BASE_LEN;
use crate::hashing::IdBuild;
use crate::state::Entry;

/// Every stored task, by ID and by slot.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    /// The entries; `None` is a slot freed by a deletion, reused by the next insert.
    slots: Vec<Option<Entry>>,
    /// Freed slots, reused last-freed first.
    free: Vec<usize>,
    /// ID → slot (hashed with [`IdBuild`]: every ack and lookup by ID goes through it).
    ids: HashMap<Arc<str>, usize, IdBuild>,
}

impl Tasks {
    /// The entry of `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&Entry> {
        self.ids.get(id).and_then(|slot| self.slots.get(*slot)?.as_ref())
    }

    /// The entry of `id`, for writing.
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Entry> {
        let slot = *self.ids.get(id)?;
        self.at_mut(slot)
    }

    /// The entry in `slot`.
    pub(crate) fn at(&self, slot: usize) -> Option<&Entry> {
        self.slots.get(slot)?.as_ref()
    }

    /// The entry of `id` when `token` is the lease token a claim gave it: found through the
    /// slot the token names after its claim's ULID ([`crate::claim`]'s tokens), without
    /// hashing the ID (the claim just touched that entry; the ID map's bucket is cold). Any
    /// other token, or a slot holding another task, falls back to the lookup by ID; either
    /// way the caller still checks the token itself.
    pub(crate) fn get_leased_mut(&mut self, id: &str, token: &str) -> Option<&mut Entry> {
        let named = token.get(TOKEN_BASE_LEN..).and_then(|digits| digits.parse::<usize>().ok());
        match named {
            Some(slot) if self.at(slot).is_some_and(|e| e.task.id == id) => self.at_mut(slot),
            _ => self.get_mut(id),
        }
    }

    /// The entry in `slot`, for writing.
    pub(crate) fn at_mut(&mut self, slot: usize) -> Option<&mut Entry> {
        self.slots.get_mut(slot)?.as_mut()
    }

    /// The slot of `id`.
    #[cfg(test)]
    pub(crate) fn slot_of(&self, id: &str) -> Option<usize> {
        self.ids.get(id).copied()
    }

    /// True when a task `id` is stored.
    pub(crate) fn contains_key(&self, id: &str) -> bool {
        self.ids.contains_key(id)
    }

    /// How many tasks are stored.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ids.len()
    }

    /// Stores `entry` (whose ID is new) in a free slot and records the slot on it.
    pub(crate) fn insert(&mut self, mut entry: Entry) -> &Entry {
        let slot = self.free.pop().unwrap_or(self.slots.len());
        entry.slot = slot;
        self.ids.insert(entry.key.clone(), slot);
        if slot == self.slots.len() {
            self.slots.push(None);
        }
        let stored = &mut self.slots[slot];
        &*stored.insert(entry)
    }

    /// Removes and returns the entry of `id`; its slot is freed.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Entry> {
        let slot = self.ids.remove(id)?;
        let entry = self.slots.get_mut(slot)?.take();
        self.free.push(slot);
        entry
    }

    /// Every stored entry, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.slots.iter().flatten()
    }
}
