//! The task record (contract §1, extensions §E9) and its status set (contract §2).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::{Error, Timestamp};

/// A task's status. Terminal statuses (`completed`, `failed`, `canceled`) have no way out.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// Waiting for parents (dependencies) to finish.
    Blocked,
    /// Ready to be claimed once `run_at` has passed.
    #[default]
    Pending,
    /// Claimed by a worker under a lease.
    Running,
    /// Failed and waiting for its next attempt at `run_at`.
    Retrying,
    /// Acked: finished successfully.
    Completed,
    /// Finished unsuccessfully (retries exhausted, a cap reached, or skipped).
    Failed,
    /// Cancelled by a user, a parent, or the reaper.
    Canceled,
}

impl Status {
    /// Every status, in the order of the state diagram.
    pub const ALL: [Status; 7] = [
        Status::Blocked,
        Status::Pending,
        Status::Running,
        Status::Retrying,
        Status::Completed,
        Status::Failed,
        Status::Canceled,
    ];

    /// The lowercase name stored in databases and shown to people.
    pub const fn as_str(self) -> &'static str {
        match self {
            Status::Blocked => "blocked",
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Retrying => "retrying",
            Status::Completed => "completed",
            Status::Failed => "failed",
            Status::Canceled => "canceled",
        }
    }

    /// True for `completed`, `failed` and `canceled`.
    pub const fn is_terminal(self) -> bool {
        matches!(self, Status::Completed | Status::Failed | Status::Canceled)
    }

    /// True for the statuses a claim may pick (`pending`, `retrying`) once `run_at` has passed.
    pub const fn is_claimable(self) -> bool {
        matches!(self, Status::Pending | Status::Retrying)
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Status {
    type Err = Error;

    fn from_str(s: &str) -> Result<Self, Error> {
        Status::ALL
            .into_iter()
            .find(|status| status.as_str() == s)
            .ok_or_else(|| Error::invalid("status", format!("unknown status {s:?}")))
    }
}

/// What a child does when a parent fails or is cancelled (contract §5).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnParentFailure {
    /// The child is cancelled as soon as a parent fails or is cancelled (the default).
    #[default]
    FailFast,
    /// A failed or cancelled parent counts as satisfied.
    IgnoreParentFailure,
}

impl OnParentFailure {
    /// The stored name: `fail_fast` or `ignore_parent_failure`.
    pub const fn as_str(self) -> &'static str {
        match self {
            OnParentFailure::FailFast => "fail_fast",
            OnParentFailure::IgnoreParentFailure => "ignore_parent_failure",
        }
    }
}

impl fmt::Display for OnParentFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for OnParentFailure {
    type Err = Error;

    /// Parses the stored name; the empty string reads as `fail_fast` (contract §1.1).
    fn from_str(s: &str) -> Result<Self, Error> {
        match s {
            "" | "fail_fast" => Ok(OnParentFailure::FailFast),
            "ignore_parent_failure" => Ok(OnParentFailure::IgnoreParentFailure),
            other => Err(Error::invalid("on_parent_failure", format!("unknown policy {other:?}"))),
        }
    }
}

/// One execution of a unit of work: the record a broker stores (contract §1.1, §E9).
///
/// Callers build one with [`Task::new`] and the `with_*` methods and hand it to
/// [`Broker::enqueue`](crate::Broker::enqueue), which returns the stored snapshot. Fields the
/// broker owns (`status`, `lease_token`, `created_at`, `cancel_requested`, steps and resumes)
/// are overwritten on enqueue. Every snapshot a broker returns is a deep copy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Task {
    /// Execution ID: a ULID generated at enqueue unless preset (tests and embedders only).
    pub id: String,
    /// Idempotency key; empty means none. Several executions may share a key (a chain).
    pub business_key: String,
    /// The execution this one was replayed from; set only by replay.
    pub replay_of: String,
    /// Task kind: selects the handler.
    pub task_type: String,
    /// The queue it is claimed from.
    pub queue: String,
    /// Opaque payload bytes, round-tripped exactly; `None` is absent.
    pub payload: Option<Vec<u8>>,
    /// Current status, decided by the broker.
    pub status: Status,
    /// Opaque result bytes written by ack.
    pub result: Option<Vec<u8>>,
    /// The most recent failure or cancel reason.
    pub last_error: String,
    /// Business failures so far.
    pub attempts: u32,
    /// Business retries allowed: `attempts > max_retry` fails the task.
    pub max_retry: u32,
    /// Lease expiries so far (worker crashes).
    pub lease_lost: u32,
    /// Throttled re-queues so far.
    pub throttled: u32,
    /// Earliest claim time; [`Timestamp::ZERO`] at enqueue means "now".
    pub run_at: Timestamp,
    /// Parent execution IDs, stored verbatim (order and duplicates kept).
    pub depends_on: Vec<String>,
    /// What happens to this task when a parent fails or is cancelled.
    pub on_parent_failure: OnParentFailure,
    /// The current claim's lease token; empty unless `running`.
    pub lease_token: String,
    /// While `running`: when the current lease expires unless a heartbeat extends it; after
    /// it the reaper takes the task back (its worker is presumed dead). `None` in every other
    /// status. Set by the broker; ignored at enqueue (contract §1.1.11).
    pub lease_expires_at: Option<Timestamp>,
    /// While `running`: when the worker holding the lease last sent an accepted heartbeat
    /// (the broker's clock); `None` right after the claim until the first heartbeat, and in
    /// every other status. With [`lease_expires_at`](Self::lease_expires_at) it tells a
    /// silent worker from a live one. Set by the broker; ignored at enqueue (contract §1.1.12).
    pub last_heartbeat_at: Option<Timestamp>,
    /// When the broker stored the task (list order key).
    pub created_at: Timestamp,
    /// The first successful claim.
    pub started_at: Option<Timestamp>,
    /// When the task reached a terminal status.
    pub finished_at: Option<Timestamp>,
    /// A cancel was requested while the task was running ("cancelling").
    pub cancel_requested: bool,
    /// The last saved step's opaque checkpoint (§E3).
    pub cursor: Option<Vec<u8>>,
    /// The last saved step's progress, 0–100 (§E3).
    pub progress: Option<u8>,
    /// The last saved step's progress note (§E3).
    pub message: String,
    /// Steps saved so far (§E3).
    pub steps: u32,
    /// Operator resumes so far (§E5).
    pub resumes: u32,
    /// Who submitted the task; empty means unknown (§E9).
    pub owner: String,
    /// Claim priority within the queues a claim reads: smaller runs first, claims order by
    /// `(priority, run_at, id)`. [`DEFAULT_PRIORITY`] (0) unless set; valid values are
    /// [`MIN_PRIORITY`]..=[`MAX_PRIORITY`] (−100 to 100), anything else is
    /// `InvalidInput { field: "priority" }` at enqueue.
    pub priority: i16,
}

/// How a task's lease stands at a moment, as operators' views show it (CLI, admin API,
/// console): the reaper takes back a `running` task whose lease has expired (contract §6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeaseState {
    /// Not running: no lease.
    None,
    /// Running, and its lease still holds for this long.
    Live {
        /// Until the deadline.
        expires_in: std::time::Duration,
    },
    /// Running, but the lease ran out this long ago: the worker stopped heart-beating
    /// (crashed, killed, cut off) and the next reaper round takes the task back.
    Expired {
        /// Since the deadline.
        ago: std::time::Duration,
    },
}

impl LeaseState {
    /// True for [`LeaseState::Expired`].
    pub fn is_expired(self) -> bool {
        matches!(self, LeaseState::Expired { .. })
    }
}

impl fmt::Display for LeaseState {
    /// `expires in 42 s`, `expired 12 s ago — the reaper will requeue it`, or nothing.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LeaseState::None => Ok(()),
            LeaseState::Live { expires_in } => write!(f, "expires in {} s", expires_in.as_secs()),
            LeaseState::Expired { ago } => {
                write!(f, "expired {} s ago — the reaper will requeue it", ago.as_secs())
            }
        }
    }
}

/// The business retries a task gets unless its submitter sets a budget, however it is made:
/// [`Task::new`] and the worker runtime's submits share it (`docs/decisions.md`, "One default
/// retry budget"). With the back-off curve (1 s doubling to a 10-minute cap) 25 retries keep a
/// failing task trying for about 2 h 50 min before it fails.
pub const DEFAULT_MAX_RETRY: u32 = 25;

/// The priority a task has unless its submitter sets one (the middle of the range, so work
/// can be made both more and less urgent than the default).
pub const DEFAULT_PRIORITY: i16 = 0;
/// The most urgent priority a task may have.
pub const MIN_PRIORITY: i16 = -100;
/// The least urgent priority a task may have.
pub const MAX_PRIORITY: i16 = 100;

impl Task {
    /// A new task of `task_type` on `queue`, ready to enqueue, with the default retry budget
    /// ([`DEFAULT_MAX_RETRY`]; `with_max_retry(0)` means no retries). `Task::default()` is the
    /// all-empty record (`max_retry` 0), not a submission.
    pub fn new(task_type: impl Into<String>, queue: impl Into<String>) -> Self {
        Task {
            task_type: task_type.into(),
            queue: queue.into(),
            max_retry: DEFAULT_MAX_RETRY,
            ..Task::default()
        }
    }

    /// The key claims take ready tasks in, smallest first (extensions §E17.2):
    /// `(priority, run_at, id)`. Backends return a claim's tasks sorted by it, and the worker
    /// runtime keeps the tasks it claimed ahead in it.
    pub fn claim_order(&self) -> (i16, Timestamp, &str) {
        (self.priority, self.run_at, self.id.as_str())
    }

    /// Presets the execution ID (tests and embedders; the public submit path never does).
    pub fn with_id(mut self, id: impl Into<String>) -> Self {
        self.id = id.into();
        self
    }

    /// Sets the opaque payload.
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = Some(payload.into());
        self
    }

    /// Sets the idempotency key.
    pub fn with_business_key(mut self, key: impl Into<String>) -> Self {
        self.business_key = key.into();
        self
    }

    /// Allows `max_retry` business retries.
    pub fn with_max_retry(mut self, max_retry: u32) -> Self {
        self.max_retry = max_retry;
        self
    }

    /// Delays the first claim until `run_at`.
    pub fn with_run_at(mut self, run_at: Timestamp) -> Self {
        self.run_at = run_at;
        self
    }

    /// Adds parents (execution IDs) this task waits for.
    pub fn with_depends_on<I, S>(mut self, parents: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.depends_on.extend(parents.into_iter().map(Into::into));
        self
    }

    /// Sets what happens when a parent fails or is cancelled.
    pub fn with_on_parent_failure(mut self, policy: OnParentFailure) -> Self {
        self.on_parent_failure = policy;
        self
    }

    /// Records who submitted the task.
    pub fn with_owner(mut self, owner: impl Into<String>) -> Self {
        self.owner = owner.into();
        self
    }

    /// Sets the claim priority: smaller runs first ([`MIN_PRIORITY`]..=[`MAX_PRIORITY`]).
    pub fn with_priority(mut self, priority: i16) -> Self {
        self.priority = priority;
        self
    }

    /// How this snapshot's lease stands at `now` (the broker's clock, [`Broker::now`]): a
    /// deadline exactly at `now` still holds, as it does for the reaper.
    ///
    /// [`Broker::now`]: crate::Broker::now
    pub fn lease_at(&self, now: Timestamp) -> LeaseState {
        match self.lease_expires_at {
            Some(at) if self.status == Status::Running && at >= now => {
                LeaseState::Live { expires_in: at.duration_since(now) }
            }
            Some(at) if self.status == Status::Running => {
                LeaseState::Expired { ago: now.duration_since(at) }
            }
            _ => LeaseState::None,
        }
    }

    /// The distinct parents in first-occurrence order (duplicates count once, contract §5.1).
    pub fn distinct_parents(&self) -> Vec<&str> {
        let mut seen = std::collections::HashSet::new();
        self.depends_on.iter().map(String::as_str).filter(|p| seen.insert(*p)).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_names_round_trip() {
        for status in Status::ALL {
            assert_eq!(status.as_str().parse::<Status>().ok(), Some(status));
        }
        assert!("done".parse::<Status>().is_err());
    }

    #[test]
    fn lease_state_reads_the_deadline_against_now() {
        let at = Timestamp::from_millis(100_000);
        let mut t = Task::new("t", "q");
        t.status = Status::Running;
        t.lease_expires_at = Some(at);
        let live = t.lease_at(Timestamp::from_millis(58_000));
        assert_eq!(live.to_string(), "expires in 42 s");
        assert!(!t.lease_at(at).is_expired(), "a deadline exactly now still holds");
        let gone = t.lease_at(Timestamp::from_millis(112_500));
        assert_eq!(gone.to_string(), "expired 12 s ago — the reaper will requeue it");
        t.status = Status::Completed;
        assert_eq!(t.lease_at(Timestamp::from_millis(112_500)), LeaseState::None);
    }

    #[test]
    fn empty_policy_reads_as_fail_fast() {
        assert_eq!("".parse::<OnParentFailure>().ok(), Some(OnParentFailure::FailFast));
    }

    #[test]
    fn distinct_parents_keep_first_occurrence_order() {
        let t = Task::new("t", "q").with_depends_on(["b", "a", "b", "c", "a"]);
        assert_eq!(t.distinct_parents(), vec!["b", "a", "c"]);
        assert_eq!(t.depends_on.len(), 5);
    }
}
