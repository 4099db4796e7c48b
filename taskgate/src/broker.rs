//! The [`Broker`] trait: the contract every backend implements (contract §3, extensions §E3–E5,
//! §E8, §E16), and the parameter types of its operations.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;

use crate::{
    AdminAction, AdminOutcome, AuditQuery, AuditRecord, BrokerOptions, Capabilities, Limits,
    QueueList, QuotaProvider, Result, Status, Task, Timestamp,
};

/// The kind of a worker-reported failure (contract §4.1).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FailKind {
    /// A handler error: consumes the business retry budget (`attempts`).
    Business,
    /// The downstream pushed back: counts `throttled`, never `attempts`.
    Throttled,
    /// Fail at once without retrying (dead letter; replayable).
    Skip,
}

/// When a failed task may run again: decided by the worker, timed by the broker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum RetryAt {
    /// At once: the broker's "now" inside the fail.
    #[default]
    Now,
    /// At this instant, as given ([`Timestamp::ZERO`] means now). A worker whose clock
    /// differs from the broker's (a PostgreSQL or MySQL server) misjudges it by that skew;
    /// prefer [`RetryAt::After`].
    At(Timestamp),
    /// This long after the broker's "now", which the broker reads inside the fail's own atomic
    /// unit (the server's clock on PostgreSQL and MySQL, no extra round trip).
    After(Duration),
}

impl RetryAt {
    /// The retry time when the broker's clock reads `now`.
    pub fn resolve(self, now: Timestamp) -> Timestamp {
        match self {
            RetryAt::Now => now,
            RetryAt::At(at) if at.is_zero() => now,
            RetryAt::At(at) => at,
            RetryAt::After(delay) => now.saturating_add(delay),
        }
    }
}

impl From<Timestamp> for RetryAt {
    /// [`RetryAt::At`], or [`RetryAt::Now`] for [`Timestamp::ZERO`].
    fn from(at: Timestamp) -> Self {
        if at.is_zero() {
            RetryAt::Now
        } else {
            RetryAt::At(at)
        }
    }
}

impl From<Duration> for RetryAt {
    /// [`RetryAt::After`].
    fn from(delay: Duration) -> Self {
        RetryAt::After(delay)
    }
}

/// What [`Broker::fail`] records.
///
/// ```
/// use std::time::Duration;
/// use taskgate::{Failure, RetryAt};
///
/// // "Retry in 30 s", timed by the broker's clock inside the fail.
/// let failure = Failure::business_after("gateway timeout", Duration::from_secs(30));
/// assert_eq!(failure.retry, RetryAt::After(Duration::from_secs(30)));
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// Which counter the failure consumes.
    pub kind: FailKind,
    /// The error text stored as `last_error`.
    pub message: String,
    /// When a retry may run. Ignored for [`FailKind::Skip`] and when no retry is left.
    pub retry: RetryAt,
}

impl Failure {
    /// A failure of `kind` retried at `retry` (a [`RetryAt`], [`Timestamp`] or [`Duration`]).
    pub fn new(kind: FailKind, message: impl Into<String>, retry: impl Into<RetryAt>) -> Self {
        Failure { kind, message: message.into(), retry: retry.into() }
    }

    /// A business failure retried at `retry_at` (zero means now).
    pub fn business(message: impl Into<String>, retry_at: Timestamp) -> Self {
        Failure::new(FailKind::Business, message, retry_at)
    }

    /// A business failure retried `delay` after the broker's now.
    pub fn business_after(message: impl Into<String>, delay: Duration) -> Self {
        Failure::new(FailKind::Business, message, delay)
    }

    /// A throttled failure retried at `retry_at` (zero means now).
    pub fn throttled(message: impl Into<String>, retry_at: Timestamp) -> Self {
        Failure::new(FailKind::Throttled, message, retry_at)
    }

    /// A throttled failure retried `delay` after the broker's now (a `Retry-After`).
    pub fn throttled_after(message: impl Into<String>, delay: Duration) -> Self {
        Failure::new(FailKind::Throttled, message, delay)
    }

    /// A failure that is final at once.
    pub fn skip(message: impl Into<String>) -> Self {
        Failure::new(FailKind::Skip, message, RetryAt::Now)
    }
}

/// A checkpoint saved by a stepwise task (§E3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Step {
    /// Opaque checkpoint handed to the next run.
    pub cursor: Option<Vec<u8>>,
    /// Progress, 0–100.
    pub progress: Option<u8>,
    /// A progress note, at most 1,000 characters.
    pub message: String,
    /// How long until the next step may run, 0–60 s.
    pub delay: Duration,
}

/// Which execution [`Broker::replay`] re-runs, and how (contract §8.3).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayRequest {
    /// Replay this execution. Exactly one of `execution_id` and `business_key` is set.
    pub execution_id: String,
    /// Replay this key's chain tail.
    pub business_key: String,
    /// Allow replaying a completed execution.
    pub allow_completed: bool,
    /// Payload of the new execution; `None` copies the target's.
    pub payload: Option<Vec<u8>>,
    /// Priority of the new execution; `None` copies the target's.
    pub priority: Option<i16>,
}

impl ReplayRequest {
    /// Replays one execution.
    pub fn by_id(id: impl Into<String>) -> Self {
        ReplayRequest { execution_id: id.into(), ..ReplayRequest::default() }
    }

    /// Replays the tail of a business key's chain.
    pub fn by_key(key: impl Into<String>) -> Self {
        ReplayRequest { business_key: key.into(), ..ReplayRequest::default() }
    }

    /// Allows a completed target.
    pub fn allow_completed(mut self) -> Self {
        self.allow_completed = true;
        self
    }

    /// Gives the new execution this payload.
    pub fn with_payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = Some(payload.into());
        self
    }

    /// Gives the new execution this priority instead of the target's.
    pub fn with_priority(mut self, priority: i16) -> Self {
        self.priority = Some(priority);
        self
    }
}

/// Which tasks [`Broker::list`] returns (contract §7.1). Empty fields do not filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Filter {
    /// Only this type.
    pub task_type: String,
    /// Only this queue.
    pub queue: String,
    /// Only this status.
    pub status: Option<Status>,
    /// Only this business key's executions (chain order).
    pub business_key: String,
    /// Only tasks submitted by this owner.
    pub owner: String,
    /// Only the direct children of this task: the tasks that list this ID in their
    /// `depends_on` (contract §7.1.2), in any status; not their children.
    pub parent: String,
    /// At most this many rows; zero means all.
    pub limit: usize,
    /// Skip this many rows first.
    pub offset: usize,
}

impl Filter {
    /// True when `task` passes every non-empty condition (limit and offset aside).
    pub fn matches(&self, task: &Task) -> bool {
        (self.task_type.is_empty() || self.task_type == task.task_type)
            && (self.queue.is_empty() || self.queue == task.queue)
            && self.status.is_none_or(|s| s == task.status)
            && (self.business_key.is_empty() || self.business_key == task.business_key)
            && (self.owner.is_empty() || self.owner == task.owner)
            && (self.parent.is_empty() || task.depends_on.contains(&self.parent))
    }
}

/// Task counts by type, then status (contract §7.4). Only existing combinations appear.
pub type Counts = BTreeMap<String, BTreeMap<Status, u64>>;

/// One queue's tasks by status and its oldest claimable time ([`Broker::queue_stats`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct QueueStats {
    /// The queue.
    pub queue: String,
    /// Its tasks by status; only statuses with tasks appear.
    pub counts: BTreeMap<Status, u64>,
    /// The earliest `run_at` among its `pending` and `retrying` tasks (delayed ones included):
    /// when it is not after the broker's now, the task behind it has been ready that long.
    pub oldest_run_at: Option<Timestamp>,
}

/// One item of [`Broker::ack_many`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AckItem {
    /// The task.
    pub id: String,
    /// Its lease token.
    pub token: String,
    /// The result to store.
    pub result: Option<Vec<u8>>,
}

/// Which finished tasks [`Broker::prune`] deletes (§E16).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PruneRequest {
    /// Only tasks that finished strictly before this instant.
    pub finished_before: Timestamp,
    /// Only these terminal statuses; empty means all three.
    pub statuses: Vec<Status>,
    /// Delete at most this many tasks; zero means no limit.
    pub limit: usize,
    /// Also delete keyed chains (whole or not at all). Dropping a chain re-opens its key.
    pub include_keyed: bool,
}

/// A durable task broker: the one behavioural contract every backend keeps.
///
/// Every method is one atomic unit. Methods that change a task's lease take its token and fail
/// with [`Error::LeaseLost`](crate::Error::LeaseLost) when it does not hold the current lease.
/// Every method before [`Broker::init`] fails with `NotInitialized`, and after
/// [`Broker::close`] with `Closed`. The trait is object-safe: runtimes and tools hold
/// `Arc<dyn Broker>`. Claims take their queues as a [`QueueList`]: `&["q"]`, `&vec_of_strings`
/// and `&slice` all work.
///
/// ```
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// use taskgate::{Broker, BrokerOptions, Task};
/// # async fn demo(broker: &dyn Broker) -> taskgate::Result<()> {
/// broker.init(BrokerOptions::default()).await?;
/// let stored = broker.enqueue(&Task::new("email", "default").with_payload(b"{}".to_vec())).await?;
/// let claimed = broker.dequeue(&["default"]).await?;
/// assert_eq!(claimed.id, stored.id);
/// broker.ack(&claimed.id, &claimed.lease_token, None).await?;
/// # Ok(()) }
/// # });
/// ```
#[async_trait]
pub trait Broker: Send + Sync {
    /// The backend's name (`memory`, `sqlite`, `postgres`, `mysql`).
    fn backend(&self) -> &'static str;

    /// Applies options (and, for server databases, migrates the schema). A second call only
    /// refreshes the options.
    async fn init(&self, options: BrokerOptions) -> Result<()>;

    /// Closes the broker: later calls fail with `Closed`, blocked dequeues return at once.
    /// Idempotent.
    async fn close(&self) -> Result<()>;

    /// The broker's current time, the clock every stored time is judged by: the injected
    /// clock when one is set ([`BrokerOptions::clock`]), else the local system clock (memory,
    /// SQLite), else the database server's (PostgreSQL, MySQL: one query). Workers compare
    /// stored times (`run_at`, lease deadlines) with this, never with their own clock.
    async fn now(&self) -> Result<Timestamp>;

    /// Stores a new task and returns the stored snapshot (generated ID, decided status,
    /// timestamps). On error nothing is stored.
    ///
    /// Provided: [`Broker::enqueue_many`] with a batch of one, which behaves exactly as one
    /// enqueue (same checks, same errors). Backends implement only the batch form.
    async fn enqueue(&self, task: &Task) -> Result<Task> {
        let mut stored = self.enqueue_many(std::slice::from_ref(task)).await?;
        stored.pop().ok_or_else(|| {
            crate::Error::backend(self.backend(), "enqueue_many stored no task for a batch of one")
        })
    }

    /// Stores several tasks in one atomic unit: all or nothing (§E8). Tasks may depend on
    /// earlier tasks of the same batch. The first failing task's error is returned; with more
    /// than one task, an `InvalidInput` reason names its index.
    async fn enqueue_many(&self, tasks: &[Task]) -> Result<Vec<Task>>;

    /// Claims up to `max` ready tasks from `queues` without waiting; may return none. The queue
    /// list is checked before `max` (at least one queue, each a valid name; `max` ≥ 1).
    async fn try_dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>>;

    /// Claims up to `max` ready tasks, waiting until at least one is ready (§E8). Cancel-safe:
    /// dropping the future either claims nothing or returns what it claimed to `pending` at once.
    async fn dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>>;

    /// Claims one ready task, waiting until one is ready. Cancel-safe like `dequeue_many`.
    async fn dequeue(&self, queues: &dyn QueueList) -> Result<Task> {
        let mut tasks = self.dequeue_many(queues, 1).await?;
        tasks.pop().ok_or_else(|| crate::Error::backend(self.backend(), "dequeue returned no task"))
    }

    /// Claims one ready task without waiting.
    async fn try_dequeue(&self, queues: &dyn QueueList) -> Result<Option<Task>> {
        Ok(self.try_dequeue_many(queues, 1).await?.pop())
    }

    /// Completes a running task with `result`, waking its children.
    ///
    /// Provided: [`Broker::ack_many`] with one item, whose outcome it returns. Backends
    /// implement only the batch form.
    async fn ack(&self, id: &str, token: &str, result: Option<Vec<u8>>) -> Result<()> {
        let item = AckItem { id: id.to_owned(), token: token.to_owned(), result };
        let mut outcomes = self.ack_many(std::slice::from_ref(&item)).await?;
        outcomes.pop().unwrap_or_else(|| {
            Err(crate::Error::backend(self.backend(), "ack_many returned no outcome for one item"))
        })
    }

    /// Completes several tasks in one atomic unit; each item succeeds or fails on its own
    /// (a stale token fails only that item). The outer error is a storage failure.
    async fn ack_many(&self, items: &[AckItem]) -> Result<Vec<Result<()>>>;

    /// Records a failure: `retrying` or `failed` per contract §4.1.
    async fn fail(&self, id: &str, token: &str, failure: Failure) -> Result<()>;

    /// Cancels a task: at once when not running; a running task only gets `cancel_requested`.
    async fn cancel(&self, id: &str) -> Result<()>;

    /// The worker's final write for a cancelled task: `canceled`.
    async fn finish_canceled(&self, id: &str, token: &str) -> Result<()>;

    /// Returns a running task to `pending` without changing any counter or `run_at`.
    async fn requeue(&self, id: &str, token: &str) -> Result<()>;

    /// Renews the lease. Fails with `Canceled` (after renewing) when a cancel was requested.
    async fn heartbeat(&self, id: &str, token: &str) -> Result<()>;

    /// Saves a stepwise task's checkpoint and releases it to run again after `step.delay`
    /// (§E3). Fails with `Canceled` (after storing the checkpoint and cancelling the task) when
    /// a cancel was requested.
    async fn save_step(&self, id: &str, token: &str, step: Step) -> Result<()>;

    /// A deep copy of one task.
    async fn get(&self, id: &str) -> Result<Task>;

    /// Creates a new execution from a finished one (contract §8.3) and returns it.
    async fn replay(&self, request: ReplayRequest) -> Result<Task>;

    /// Runs a failed or cancelled task again under the same ID (operator resume, §E5).
    async fn resume(&self, id: &str) -> Result<Task>;

    /// Tasks matching `filter` in `(created_at, id)` order (contract §7.2).
    async fn list(&self, filter: &Filter) -> Result<Vec<Task>>;

    /// Pending and retrying tasks of `queue`, delayed ones included (contract §7.3).
    async fn queue_len(&self, queue: &str) -> Result<u64>;

    /// Task counts by type and status (contract §7.4).
    async fn counts(&self) -> Result<Counts>;

    /// Handles expired leases and repairs blocked tasks (contract §6); returns how many expired
    /// leases it handled.
    async fn reap_expired(&self) -> Result<u64>;

    /// Stops claims from `queue` (persisted, shared by every handle on the storage; §E4).
    async fn pause_queue(&self, queue: &str) -> Result<()>;

    /// Lets claims from `queue` resume and wakes waiting claimers.
    async fn resume_queue(&self, queue: &str) -> Result<()>;

    /// The paused queues, sorted.
    async fn paused_queues(&self) -> Result<Vec<String>>;

    /// Deletes old finished tasks (§E16); returns how many were deleted.
    async fn prune(&self, request: PruneRequest) -> Result<u64>;

    /// What this backend supports beyond the core contract, declared (not discovered by
    /// failing). `quota` is true exactly when [`Broker::quota_provider`] returns a provider.
    fn capabilities(&self) -> Capabilities;

    /// The size limits in force since `init`: the largest payload, result or cursor this
    /// broker accepts — [`BrokerOptions::max_payload_bytes`] (16 MiB by default), lowered to
    /// what the storage can hold where that is less (MySQL/MariaDB: the server's
    /// `max_allowed_packet`, named in [`Limits::bound`](crate::Limits::bound)). A value of
    /// exactly that size is stored and read back whole; one byte more is
    /// `InvalidInput` naming the field. `NotInitialized` before `init`, `Closed` after
    /// `close`.
    fn limits(&self) -> Result<Limits>;

    /// Every queue that holds tasks, sorted by name (bytes), with its counts by status and the
    /// earliest `run_at` of its pending and retrying tasks (extensions §E13, the admin API's
    /// queue view). A read, like [`Broker::counts`]: it may scan every task.
    ///
    /// Provided: computed from [`Broker::list`] of every task. SQL backends answer it with one
    /// grouped query.
    async fn queue_stats(&self) -> Result<Vec<QueueStats>> {
        let mut stats: BTreeMap<String, QueueStats> = BTreeMap::new();
        for task in self.list(&Filter::default()).await? {
            let entry = stats.entry(task.queue.clone()).or_insert_with(|| QueueStats {
                queue: task.queue.clone(),
                ..QueueStats::default()
            });
            *entry.counts.entry(task.status).or_default() += 1;
            if matches!(task.status, Status::Pending | Status::Retrying) {
                let oldest = entry.oldest_run_at.get_or_insert(task.run_at);
                *oldest = (*oldest).min(task.run_at);
            }
        }
        let mut stats: Vec<QueueStats> = stats.into_values().collect();
        stats.sort_unstable_by(|a, b| a.queue.as_bytes().cmp(b.queue.as_bytes()));
        Ok(stats)
    }

    /// Performs an operator's `action` as `actor` and records it (extensions §E13, module
    /// [`audit`](crate::audit)): a change and its [`AuditRecord`] commit in one atomic unit; an
    /// action the contract rejects changes nothing, records its error code as the outcome and
    /// returns the error; bad input and storage failures record nothing.
    ///
    /// Provided: fails with `InvalidInput` (field `audit`) on a backend whose
    /// [`Capabilities::audit`] is false. Every backend of this workspace implements it.
    async fn audited(&self, actor: &str, action: &AdminAction) -> Result<AdminOutcome> {
        let _ = (actor, action);
        Err(crate::Error::invalid("audit", format!("{} does not record audits", self.backend())))
    }

    /// The audit records matching `query`, newest first.
    ///
    /// Provided: fails like [`Broker::audited`] where [`Capabilities::audit`] is false.
    async fn audit_log(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        let _ = query;
        Err(crate::Error::invalid("audit", format!("{} does not record audits", self.backend())))
    }

    /// The periodic-quota capability, when the backend has it (contract §9).
    fn quota_provider(&self) -> Option<&dyn QuotaProvider> {
        None
    }

    /// Enqueue inside the caller's own database transaction (extensions §E15), when the
    /// backend has it: `Some` exactly where [`Capabilities::transactional_enqueue`] is true.
    fn tx_enqueue(&self) -> Option<&dyn crate::TxEnqueue> {
        None
    }
}
