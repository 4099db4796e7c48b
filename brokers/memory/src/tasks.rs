//! The task table: every stored entry in a numbered slot, found by ID through a hash map of
//! slot numbers. The claim index names each ready task's slot, so a claim reaches its entry
//! without hashing the ID. Slots live in fixed-size chunks: entries enqueued together sit
//! next to each other (a backlog is claimed in enqueue order, so claims walk memory forwards),
//! and growing the table adds a chunk instead of moving every record under the lock.

use std::collections::HashMap;
use std::sync::Arc;

use crate::claim::TOKEN_BASE_LEN;
use crate::hashing::IdBuild;
use crate::state::Entry;

/// Slots per chunk (about 2 MB of entries).
const CHUNK: usize = 4096;

/// Every stored task, by ID and by slot.
#[derive(Debug, Default)]
pub(crate) struct Tasks {
    /// The entries, slot `s` at `chunks[s / CHUNK][s % CHUNK]`; every chunk but the last is
    /// full. `None` is a slot freed by a deletion, reused by the next insert.
    chunks: Vec<Vec<Option<Entry>>>,
    /// Freed slots, reused last-freed first.
    free: Vec<usize>,
    /// ID → slot (hashed with [`IdBuild`]: every ack and lookup by ID goes through it).
    ids: HashMap<Arc<str>, usize, IdBuild>,
}

impl Tasks {
    /// The entry of `id`.
    pub(crate) fn get(&self, id: &str) -> Option<&Entry> {
        self.ids.get(id).and_then(|slot| self.at(*slot))
    }

    /// The entry of `id`, for writing.
    pub(crate) fn get_mut(&mut self, id: &str) -> Option<&mut Entry> {
        let slot = *self.ids.get(id)?;
        self.at_mut(slot)
    }

    /// The entry in `slot`.
    pub(crate) fn at(&self, slot: usize) -> Option<&Entry> {
        self.chunks.get(slot / CHUNK)?.get(slot % CHUNK)?.as_ref()
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
        self.chunks.get_mut(slot / CHUNK)?.get_mut(slot % CHUNK)?.as_mut()
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
        let slot = match self.free.pop() {
            Some(slot) => slot,
            None => self.push_slot(),
        };
        entry.slot = slot;
        self.ids.insert(entry.key.clone(), slot);
        let stored = &mut self.chunks[slot / CHUNK][slot % CHUNK];
        stored.insert(entry)
    }

    /// Appends an empty slot (in a new chunk when the last one is full) and returns it.
    fn push_slot(&mut self) -> usize {
        if self.chunks.last().is_none_or(|chunk| chunk.len() == CHUNK) {
            self.chunks.push(Vec::with_capacity(CHUNK));
        }
        let full = (self.chunks.len() - 1) * CHUNK;
        let last = self.chunks.last_mut().map_or(0, |chunk| {
            chunk.push(None);
            chunk.len() - 1
        });
        full + last
    }

    /// Removes and returns the entry of `id`; its slot is freed.
    pub(crate) fn remove(&mut self, id: &str) -> Option<Entry> {
        let slot = self.ids.remove(id)?;
        let entry = self.chunks.get_mut(slot / CHUNK)?.get_mut(slot % CHUNK)?.take();
        self.free.push(slot);
        entry
    }

    /// Every stored entry, in slot order.
    pub(crate) fn values(&self) -> impl Iterator<Item = &Entry> + '_ {
        self.chunks.iter().flatten().flatten()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(id: &str) -> Entry {
        Entry {
            key: Arc::from(id),
            slot: usize::MAX,
            task: taskgate::Task::new("t", "q").with_id(id),
            lease: None,
            lease_until: 0,
            pending_parents: 0,
            parents: Vec::new(),
            children: Vec::new(),
        }
    }

    #[test]
    fn slots_span_chunks_and_freed_slots_are_reused() {
        let mut tasks = Tasks::default();
        for i in 0..CHUNK + 3 {
            let slot = tasks.insert(entry(&format!("id{i}"))).slot;
            assert_eq!(slot, i);
        }
        assert_eq!(tasks.chunks.len(), 2);
        let last = format!("id{}", CHUNK + 1);
        assert_eq!(tasks.get(&last).map(|e| e.slot), Some(CHUNK + 1));
        assert!(tasks.remove("id7").is_some());
        assert!(tasks.get("id7").is_none());
        assert_eq!(tasks.insert(entry("again")).slot, 7);
        assert_eq!(tasks.values().count(), CHUNK + 3);
        assert_eq!(tasks.at(7).map(|e| e.task.id.as_str()), Some("again"));
    }
}
