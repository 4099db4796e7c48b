//! What a handle remembers of writes whose outcome it could not settle ([`Unresolved`]), until
//! the same call comes again, and what a write attempt leaves to publish ([`Settled`]). The
//! settle steps themselves are in `resolve.rs`.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use taskgate::wake::Wakes;
use taskgate::{Task, Timestamp};

/// How many unsettled enqueue calls a handle remembers (the oldest is forgotten first).
const MAX_ENQUEUES: usize = 1_024;
/// How many unsettled ack items a handle remembers.
const MAX_ACKS: usize = 65_536;

/// A transaction body's value with the Notify snapshots and the wake-up it produced: what a
/// committed attempt publishes, and what a lost attempt would have.
pub(crate) type Settled<T> = (T, Vec<Task>, Wakes);

/// An enqueue call whose outcome is unknown: its input, the IDs it chose, and what each
/// attempt whose COMMIT was lost would have returned.
pub(crate) struct UnsettledEnqueue {
    /// The tasks as the caller passed them.
    pub(crate) input: Vec<Task>,
    /// The ID of each task, in order.
    pub(crate) ids: Vec<String>,
    /// The attempts whose COMMIT's outcome is unknown.
    pub(crate) attempts: Vec<Settled<Vec<Task>>>,
}

/// What a handle remembers of calls it could not settle, until the same call comes again.
#[derive(Default)]
pub(crate) struct Unresolved {
    enqueues: Mutex<VecDeque<UnsettledEnqueue>>,
    /// (task ID, lease token) → what lost ack attempts wrote.
    acks: Mutex<HashMap<(String, String), LostAck>>,
}

/// What the lost attempts of one ack item (an ID with its token) may have written.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LostAck {
    /// The `finished_at` each lost transaction wrote.
    pub(crate) finished: Vec<Timestamp>,
    /// A one-statement (autocommit) ack of the item lost its answer: applied if, and only if,
    /// the task's `ack_token` is the item's token.
    pub(crate) autocommit: bool,
}

impl LostAck {
    /// True when no lost attempt may have acked the item.
    pub(crate) fn is_empty(&self) -> bool {
        self.finished.is_empty() && !self.autocommit
    }
}

impl Unresolved {
    /// Takes the unsettled enqueue whose input equals `tasks`, if there is one.
    pub(crate) fn take_enqueue(&self, tasks: &[Task]) -> Option<UnsettledEnqueue> {
        let mut list = self.enqueues.lock().unwrap_or_else(|p| p.into_inner());
        if list.is_empty() {
            return None;
        }
        let at = list.iter().position(|e| e.input == tasks)?;
        list.remove(at)
    }

    /// Remembers an enqueue call whose outcome is unknown.
    pub(crate) fn put_enqueue(&self, unsettled: UnsettledEnqueue) {
        let mut list = self.enqueues.lock().unwrap_or_else(|p| p.into_inner());
        if list.len() >= MAX_ENQUEUES {
            list.pop_front();
        }
        list.push_back(unsettled);
    }

    /// [`Unresolved::take_ack`] for each item, in order.
    pub(crate) fn take_acks(&self, items: &[taskgate::AckItem]) -> Vec<LostAck> {
        items.iter().map(|item| self.take_ack(&item.id, &item.token)).collect()
    }

    /// Takes what is remembered of an ack of `id` with `token`: what its lost attempts wrote.
    pub(crate) fn take_ack(&self, id: &str, token: &str) -> LostAck {
        let mut acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        if acks.is_empty() {
            return LostAck::default();
        }
        acks.remove(&(id.to_owned(), token.to_owned())).unwrap_or_default()
    }

    /// Remembers what attempts of an ack of `id` with `token`, whose outcome is unknown, wrote.
    pub(crate) fn put_ack(&self, id: &str, token: &str, lost: LostAck) {
        let mut acks = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        if acks.len() >= MAX_ACKS {
            if let Some(any) = acks.keys().next().cloned() {
                acks.remove(&any);
            }
        }
        let entry = acks.entry((id.to_owned(), token.to_owned())).or_default();
        entry.finished.extend(lost.finished);
        entry.autocommit |= lost.autocommit;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsettled_calls_are_taken_once_by_equal_input() {
        let registry = Unresolved::default();
        let input = vec![Task::new("t", "q")];
        registry.put_enqueue(UnsettledEnqueue {
            input: input.clone(),
            ids: vec!["01J".into()],
            attempts: Vec::new(),
        });
        assert!(registry.take_enqueue(&[Task::new("t", "other")]).is_none());
        assert_eq!(registry.take_enqueue(&input).map(|e| e.ids), Some(vec!["01J".to_owned()]));
        assert!(registry.take_enqueue(&input).is_none(), "taken once");
        let lost = LostAck { finished: vec![Timestamp::from_millis(1)], autocommit: false };
        registry.put_ack("a", "tok", lost.clone());
        registry.put_ack("a", "tok", LostAck { finished: Vec::new(), autocommit: true });
        assert_eq!(registry.take_ack("a", "other"), LostAck::default());
        let merged = LostAck { autocommit: true, ..lost };
        assert_eq!(registry.take_ack("a", "tok"), merged);
        assert!(registry.take_ack("a", "tok").is_empty());
    }
}
