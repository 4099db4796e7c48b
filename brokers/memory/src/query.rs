//! The read-only queries (contract §7): get, list in `(created_at, id)` order, queue length
//! and counts. Every result is a deep copy.

use std::sync::Arc;

use taskgate::{Counts, Error, Filter, Result, Task};

use crate::state::{Entry, State};

impl State {
    /// A deep copy of one task.
    pub(crate) fn get(&self, id: &str) -> Result<Task> {
        self.tasks.get(id).map(Entry::snapshot).ok_or_else(|| Error::not_found(id))
    }

    /// Tasks matching `filter`, in `(created_at, id)` order, then offset and limit.
    pub(crate) fn list(&self, filter: &Filter) -> Vec<Task> {
        let limit = if filter.limit == 0 { usize::MAX } else { filter.limit };
        let page = |entries: &mut dyn Iterator<Item = &Entry>| -> Vec<Task> {
            let matching = entries.filter(|e| filter.matches(&e.task)).skip(filter.offset);
            matching.take(limit).map(Entry::snapshot).collect()
        };
        // A parent's children and a key's chain are short lists: gather, sort and page them
        // instead of walking every task in creation order.
        let ids: &[Arc<str>] = if !filter.parent.is_empty() {
            self.tasks.get(filter.parent.as_str()).map_or(&[], |e| &e.children)
        } else if !filter.business_key.is_empty() {
            self.chains.get(&filter.business_key).map_or(&[], Vec::as_slice)
        } else {
            let mut all = self.created.iter().filter_map(|(_, id)| self.tasks.get(id));
            return page(&mut all);
        };
        let mut few: Vec<&Entry> = ids.iter().filter_map(|id| self.tasks.get(id)).collect();
        few.sort_by(|a, b| (a.task.created_at, &a.key).cmp(&(b.task.created_at, &b.key)));
        page(&mut few.into_iter())
    }

    /// Pending and retrying tasks of `queue`, delayed ones included.
    pub(crate) fn queue_len(&self, queue: &str) -> u64 {
        let len = self.index.claimable.get(queue).map_or(0, |ready| ready.len);
        u64::try_from(len).unwrap_or(u64::MAX)
    }

    /// Task counts by type, then status; only existing combinations.
    pub(crate) fn counts(&self) -> Counts {
        let mut counts = Counts::new();
        for entry in self.tasks.values() {
            let by_status = counts.entry(entry.task.task_type.clone()).or_default();
            *by_status.entry(entry.task.status).or_default() += 1;
        }
        counts
    }
}
