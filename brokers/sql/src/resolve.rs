//! Settling writes whose COMMIT's outcome was lost with the connection (docs/decisions.md,
//! "Connections and failures").
//!
//! An enqueue runs its transaction again under the IDs it chose before the first attempt
//! (the primary key makes a second copy impossible; a run that finds its rows there compares
//! them with what it wrote), and an ack runs again with the same tokens (a run that finds the
//! task completed compares `finished_at` and the result with what the lost attempt wrote). An
//! ack that ran as one autocommit statement (PostgreSQL, a childless task) and lost its answer
//! is proven applied by the task's `ack_token`: the statement writes the token it acked with,
//! and a token belongs to one claim.
//! When the server stays unreachable the call reports the outcome as unknown, and
//! [`Unresolved`] keeps what it needs so that repeating the same call on the handle settles
//! it without a duplicate.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;

use taskgate::{Task, Timestamp};

use crate::core::Settled;

/// How many unsettled enqueue calls a handle remembers (the oldest is forgotten first).
const MAX_ENQUEUES: usize = 1_024;
/// How many unsettled ack items a handle remembers.
const MAX_ACKS: usize = 65_536;

/// True when `stored` (read back now) is the task an attempt wrote as `written`: the fields
/// an enqueue sets and nothing later changes — ID, type, queue, payload, business key,
/// owner, parents, parent-failure policy, retry budget, priority and creation time. Status, lease,
/// counters, result and step fields move on after the enqueue and are not compared. A
/// `written` creation time of zero is the server's time, not known to the attempt (a lost
/// one-statement enqueue, whose generated ID no other call uses): not compared either.
pub(crate) fn same_submission(stored: &Task, written: &Task) -> bool {
    stored.id == written.id
        && stored.task_type == written.task_type
        && stored.queue == written.queue
        && stored.payload == written.payload
        && stored.business_key == written.business_key
        && stored.owner == written.owner
        && stored.depends_on == written.depends_on
        && stored.on_parent_failure == written.on_parent_failure
        && stored.max_retry == written.max_retry
        && stored.priority == written.priority
        && (written.created_at.is_zero() || stored.created_at == written.created_at)
}

/// Gives each task of a settled attempt whose creation time was the server's (zero in the
/// attempt: [`same_submission`]) the time `stored` holds, and that time as its `run_at` when
/// the task left it open.
pub(crate) fn fill_server_times(tasks: &mut [Task], stored: &HashMap<String, Task>) {
    for task in tasks.iter_mut().filter(|t| t.created_at.is_zero()) {
        if let Some(row) = stored.get(&task.id) {
            task.created_at = row.created_at;
            if task.run_at.is_zero() {
                task.run_at = row.created_at;
            }
        }
    }
}

/// The index of the attempt in `attempts` whose tasks all appear in `stored` as written.
pub(crate) fn applied_enqueue(
    stored: &HashMap<String, Task>,
    attempts: &[Settled<Vec<Task>>],
) -> Option<usize> {
    attempts.iter().position(|(written, _, _)| {
        written.iter().all(|w| stored.get(&w.id).is_some_and(|s| same_submission(s, w)))
    })
}

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

    fn written() -> Task {
        let mut t = Task::new("t", "q").with_id("01J").with_payload(b"p".to_vec());
        t.created_at = Timestamp::from_millis(5);
        t
    }

    #[test]
    fn a_submission_is_recognised_by_what_the_enqueue_wrote_only() {
        let w = written();
        let mut later = w.clone();
        later.status = taskgate::Status::Completed;
        later.attempts = 1;
        later.result = Some(b"r".to_vec());
        assert!(same_submission(&later, &w), "what changed after the enqueue is not compared");
        let mut other = w.clone();
        other.created_at = Timestamp::from_millis(6);
        assert!(!same_submission(&other, &w), "another enqueue of the same ID");
        let mut other = w.clone();
        other.payload = None;
        assert!(!same_submission(&other, &w));
    }

    #[test]
    fn the_attempt_whose_rows_are_all_there_is_the_applied_one() {
        let first = written();
        let mut second = written();
        second.created_at = Timestamp::from_millis(9);
        let woke = || {
            let mut wakes = taskgate::wake::Wakes::default();
            wakes.ready("q");
            wakes
        };
        let attempts = vec![
            (vec![first.clone()], vec![], taskgate::wake::Wakes::default()),
            (vec![second.clone()], vec![], woke()),
        ];
        let stored = HashMap::from([(second.id.clone(), second)]);
        assert_eq!(applied_enqueue(&stored, &attempts), Some(1));
        assert_eq!(applied_enqueue(&HashMap::new(), &attempts), None);
    }

    #[test]
    fn a_lost_one_statement_enqueue_is_recognised_without_the_servers_time() {
        let stored = written();
        let mut lost = written();
        lost.created_at = Timestamp::ZERO;
        assert!(same_submission(&stored, &lost), "the server's time is not compared");
        let mut other = lost.clone();
        other.payload = Some(b"other".to_vec());
        assert!(!same_submission(&stored, &other), "everything else still is");
        let rows = HashMap::from([(stored.id.clone(), stored.clone())]);
        let mut open = lost.clone();
        open.run_at = Timestamp::ZERO;
        let mut delayed = lost.clone();
        delayed.run_at = Timestamp::from_millis(90);
        let mut settled = [open, delayed];
        fill_server_times(&mut settled, &rows);
        assert_eq!(
            settled.each_ref().map(|t| (t.created_at, t.run_at)),
            [
                (stored.created_at, stored.created_at),
                (stored.created_at, Timestamp::from_millis(90)),
            ]
        );
    }

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
