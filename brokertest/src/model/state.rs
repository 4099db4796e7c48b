//! The reference model's data: every task with the internal fields the contract defines
//! (lease deadline, pending-parent counter, dependency edges), the paused queues and the clock —
//! plain values, no I/O, no locks — and the read-only queries over them (contract §7).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use taskgate::{
    BrokerOptions, Clock, Counts, Filter, ManualClock, Status, Task, Timestamp, CONTRACT_EPOCH,
};

use super::call::Fault;

/// The broker options every model case runs with (the model and the backend share them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelOptions {
    /// Lease TTL of queues without their own.
    pub default_ttl: Duration,
    /// Per-queue lease TTLs.
    pub queue_ttl: Vec<(String, Duration)>,
    /// Reap cap.
    pub lease_lost_max: u32,
    /// Throttle cap.
    pub throttled_max: u32,
}

impl Default for ModelOptions {
    /// TTL 60 s (queue `qb`: 20 s), reap cap 3, throttle cap 3 — small caps so random
    /// sequences reach them.
    fn default() -> Self {
        ModelOptions {
            default_ttl: Duration::from_secs(60),
            queue_ttl: vec![("qb".to_owned(), Duration::from_secs(20))],
            lease_lost_max: 3,
            throttled_max: 3,
        }
    }
}

impl ModelOptions {
    /// The lease TTL of `queue`.
    pub fn ttl(&self, queue: &str) -> Duration {
        self.queue_ttl.iter().find(|(q, _)| q == queue).map_or(self.default_ttl, |(_, d)| *d)
    }

    /// The same options for a broker that reads `clock`.
    pub fn broker_options(&self, clock: &ManualClock) -> BrokerOptions {
        let mut options = BrokerOptions {
            default_lease_ttl: self.default_ttl,
            lease_lost_max: self.lease_lost_max,
            throttled_max: self.throttled_max,
            clock: Some(Arc::new(clock.clone()) as Arc<dyn Clock>),
            ..BrokerOptions::default()
        };
        for (queue, ttl) in &self.queue_ttl {
            options = options.with_lease_ttl(queue.clone(), *ttl);
        }
        options
    }
}

/// One dependency edge, kept on the child: the parent and whether its propagation ran.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Edge {
    pub(crate) parent: String,
    pub(crate) done: bool,
}

/// A task as the model stores it: the visible record plus the contract's internal fields.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    /// The record callers see, with model names for IDs and tokens.
    pub(crate) task: Task,
    /// Sorts like the backend's ID: preset IDs by themselves, generated IDs (ULIDs, which
    /// start with a digit and are monotonic) before every preset ID, in creation order.
    pub(crate) order: String,
    /// Lease deadline; zero = none.
    pub(crate) lease_until: Timestamp,
    /// Distinct parents not yet satisfied.
    pub(crate) pending_parents: u32,
    /// One edge per distinct parent.
    pub(crate) edges: Vec<Edge>,
    /// Every lease token issued to this task, oldest first.
    pub(crate) tokens: Vec<String>,
}

/// The pure reference model of the broker contract (see the [module docs](super)).
#[derive(Clone, Debug)]
pub struct Model {
    pub(crate) options: ModelOptions,
    pub(crate) now: Timestamp,
    pub(crate) tasks: BTreeMap<String, Entry>,
    pub(crate) paused: BTreeSet<String>,
    /// Generated IDs handed out so far (`g1`, `g2`, …).
    pub(crate) generated: u32,
    /// Lease tokens handed out so far.
    pub(crate) claims: u32,
}

impl Default for Model {
    fn default() -> Self {
        Model::new(ModelOptions::default())
    }
}

impl Model {
    /// An empty store at 2026-01-01T00:00:00Z, the contract suite's epoch.
    pub fn new(options: ModelOptions) -> Self {
        let epoch = i64::try_from(CONTRACT_EPOCH.as_millis()).unwrap_or(i64::MAX);
        Model {
            options,
            now: Timestamp::from_millis(epoch),
            tasks: BTreeMap::new(),
            paused: BTreeSet::new(),
            generated: 0,
            claims: 0,
        }
    }

    /// The options the model (and the backend under test) runs with.
    pub fn options(&self) -> &ModelOptions {
        &self.options
    }

    /// The model's clock.
    pub fn now(&self) -> Timestamp {
        self.now
    }

    /// Every task's model name, in name order.
    pub fn names(&self) -> Vec<String> {
        self.tasks.keys().cloned().collect()
    }

    /// A task's current record, if it exists.
    pub fn task(&self, name: &str) -> Option<&Task> {
        self.tasks.get(name).map(|e| &e.task)
    }

    /// The model name the next generated ID gets.
    pub(crate) fn next_generated_name(&self) -> String {
        format!("g{}", self.generated + 1)
    }

    pub(crate) fn entry(&self, name: &str) -> Result<&Entry, Fault> {
        self.tasks.get(name).ok_or_else(Fault::not_found)
    }

    pub(crate) fn entry_mut(&mut self, name: &str) -> Result<&mut Entry, Fault> {
        self.tasks.get_mut(name).ok_or_else(Fault::not_found)
    }

    pub(crate) fn status_of(&self, name: &str) -> Option<Status> {
        self.tasks.get(name).map(|e| e.task.status)
    }

    /// Tasks matching `filter` in `(created_at, id)` order, then offset and limit (§7.2).
    pub fn list(&self, filter: &Filter) -> Vec<Task> {
        let mut rows: Vec<&Entry> =
            self.tasks.values().filter(|e| filter.matches(&e.task)).collect();
        rows.sort_by(|a, b| (a.task.created_at, &a.order).cmp(&(b.task.created_at, &b.order)));
        let rows = rows.into_iter().skip(filter.offset).map(|e| e.task.clone());
        if filter.limit == 0 {
            rows.collect()
        } else {
            rows.take(filter.limit).collect()
        }
    }

    /// Pending and retrying tasks of `queue`, delayed ones included (§7.3).
    pub fn queue_len(&self, queue: &str) -> u64 {
        let n = self
            .tasks
            .values()
            .filter(|e| e.task.queue == queue && e.task.status.is_claimable())
            .count();
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    /// Counts by type and status; only existing combinations (§7.4).
    pub fn counts(&self) -> Counts {
        let mut counts = Counts::new();
        for e in self.tasks.values() {
            let by_status = counts.entry(e.task.task_type.clone()).or_default();
            *by_status.entry(e.task.status).or_insert(0) += 1;
        }
        counts
    }

    /// The paused queues, sorted.
    pub fn paused_queues(&self) -> Vec<String> {
        self.paused.iter().cloned().collect()
    }

    /// Names of the claimable tasks of `queues` in claim order `(priority, run_at, id)`: pending or
    /// retrying, due, and not in a paused queue.
    pub(crate) fn ready(&self, queues: &[String]) -> Vec<String> {
        let mut ready: Vec<&Entry> = self
            .tasks
            .values()
            .filter(|e| e.task.status.is_claimable() && e.task.run_at <= self.now)
            .filter(|e| queues.contains(&e.task.queue) && !self.paused.contains(&e.task.queue))
            .collect();
        ready.sort_by(|a, b| {
            (a.task.priority, a.task.run_at, &a.order).cmp(&(
                b.task.priority,
                b.task.run_at,
                &b.order,
            ))
        });
        ready.into_iter().map(|e| e.task.id.clone()).collect()
    }

    /// True when some execution names `name` as its `replay_of` (the SQL backends' derived
    /// "already replayed" marker, contract §1.1).
    pub(crate) fn replayed(&self, name: &str) -> bool {
        self.tasks.values().any(|e| e.task.replay_of == name)
    }

    /// The tail of `key`'s chain: the execution with that key nobody replays.
    pub(crate) fn tail(&self, key: &str) -> Option<&Entry> {
        self.tasks
            .values()
            .filter(|e| e.task.business_key == key && !self.replayed(&e.task.id))
            .max_by(|a, b| (a.task.created_at, &a.order).cmp(&(b.task.created_at, &b.order)))
    }

    /// Names of tasks in id order (the order the SQL backends scan by), filtered.
    pub(crate) fn names_where(&self, keep: impl Fn(&Entry) -> bool) -> Vec<String> {
        let mut rows: Vec<&Entry> = self.tasks.values().filter(|e| keep(e)).collect();
        rows.sort_by(|a, b| a.order.cmp(&b.order));
        rows.into_iter().map(|e| e.task.id.clone()).collect()
    }
}
