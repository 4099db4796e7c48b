//! In-memory taskgate broker: the whole contract in one process, for tests and single-process services.
//!
//! [`MemoryBroker`] keeps every task in a map under one mutex; each operation is one critical
//! section (the contract's "atomic unit"). Claims come from per-queue `(run_at, id)` indexes,
//! so claiming costs O(log n) whatever the number of finished tasks. Blocked claimers are woken
//! in-process by every write that makes a task claimable, and wait for delayed tasks on the
//! broker's clock. Notify snapshots are published after the lock is released.
//!
//! Nothing is persisted: the store lives as long as a handle on it. [`MemoryBroker::handle`]
//! opens a second handle on the same store (for several components, or race tests), each with
//! its own options and lifecycle.
//!
//! ```
//! use taskgate::{Broker, BrokerOptions, Status, Task};
//! use taskgate_memory::MemoryBroker;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let broker = MemoryBroker::new();
//! broker.init(BrokerOptions::default()).await?;
//!
//! let parent = broker.enqueue(&Task::new("fetch", "io")).await?;
//! let child = broker.enqueue(&Task::new("parse", "cpu").with_depends_on([&parent.id])).await?;
//! assert_eq!(child.status, Status::Blocked);
//!
//! let claimed = broker.dequeue(&["io"]).await?;
//! broker.ack(&claimed.id, &claimed.lease_token, Some(b"{\"ok\":true}".to_vec())).await?;
//! assert_eq!(broker.get(&child.id).await?.status, Status::Pending);
//!
//! broker.close().await?;
//! # Ok::<(), taskgate::Error>(())
//! # }).unwrap();
//! ```

mod claim;
mod enqueue;
mod hashing;
mod identity;
mod ops;
mod propagate;
mod prune;
mod query;
mod quota;
mod reap;
mod state;
mod tasks;
#[cfg(test)]
mod tests;
mod txn;

#[cfg(feature = "testing")]
pub mod testing;

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use taskgate::audit::{record_for, records_rejection, validate_action};
use taskgate::validate::{
    prune_statuses, validate_claim, validate_id, validate_queue, validate_replay_request,
    validate_step, validate_tasks,
};
use taskgate::wake::{wait_for_work, Interest, Lifecycle, Probe, Waiting};
use taskgate::{
    AckItem, AdminAction, AdminOutcome, AuditQuery, AuditRecord, Broker, BrokerOptions,
    Capabilities, Counts, Failure, Filter, Limits, PruneRequest, QueueList, QuotaConfig, QuotaGate,
    QuotaProvider, ReplayRequest, ResolvedOptions, Result, Step, Task, Timestamp,
};

use crate::prune::Rules;
use crate::state::State;
use crate::txn::{Store, Txn};

/// The backend's name in errors and reports.
pub(crate) const NAME: &str = "memory";

/// One handle's own part: its lifecycle (options, closed flag) and the store it opens.
#[derive(Debug, Default)]
pub(crate) struct Handle {
    /// Not initialised / ready with options / closed.
    pub(crate) life: Lifecycle,
    /// The storage shared with every other handle on it.
    pub(crate) store: Arc<Store>,
    /// A test's hook, run after each of this handle's critical sections (feature `test-hooks`).
    #[cfg(feature = "test-hooks")]
    pub(crate) after_write: testing::AfterWrite,
}

/// A handle on an in-memory task store, implementing [`Broker`].
///
/// [`MemoryBroker::new`] creates an empty store; [`MemoryBroker::handle`] opens another handle
/// on the same store. Every handle must be [`init`](Broker::init)ialised before use and can be
/// closed on its own.
#[derive(Default)]
pub struct MemoryBroker {
    inner: Arc<Handle>,
}

impl fmt::Debug for MemoryBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBroker").field("closed", &self.inner.life.is_closed()).finish()
    }
}

impl MemoryBroker {
    /// A new, empty store and an uninitialised handle on it.
    pub fn new() -> Self {
        MemoryBroker::default()
    }

    /// A second, uninitialised handle on the same store and the same in-process wake-ups,
    /// with its own options and lifecycle: closing one handle does not close the other.
    pub fn handle(&self) -> MemoryBroker {
        let inner = Handle { store: self.inner.store.clone(), ..Handle::default() };
        MemoryBroker { inner: Arc::new(inner) }
    }

    /// Runs `f` as one atomic unit with this handle's options.
    fn write<R>(&self, f: impl FnOnce(&mut Txn<'_>) -> Result<R>) -> Result<R> {
        let opts = self.inner.life.options()?;
        self.store_write(&opts, f)?
    }

    /// Runs `f` as one atomic unit with `opts` (then a test's after-write hook, if any).
    fn store_write<R>(
        &self,
        opts: &ResolvedOptions,
        f: impl FnOnce(&mut Txn<'_>) -> R,
    ) -> Result<R> {
        let out = self.inner.store.write(opts, f);
        #[cfg(feature = "test-hooks")]
        self.inner.after_write.run("write");
        out
    }

    /// Runs a read under the lock, after the lifecycle check.
    fn read<R>(&self, f: impl FnOnce(&State) -> R) -> Result<R> {
        self.inner.life.options()?;
        let state = self.inner.store.lock()?;
        Ok(f(&state))
    }

    /// One claim attempt of a waiting dequeue: claims synchronously, so a dropped future never
    /// strands a task (§E0).
    fn probe(&self, queues: &[&str], max: usize) -> Result<Probe> {
        let claimed = claim_buffer(max);
        self.write(|txn| {
            let claimed = txn.claim_into(queues, max, claimed)?;
            if claimed.is_empty() {
                Ok(Probe::Idle { next_due_in: txn.next_due(queues) })
            } else {
                Ok(Probe::Claimed(claimed))
            }
        })
    }
}

/// Tasks a claim's result vector holds without growing when it is allocated before the lock.
const CLAIM_BUFFER: usize = 256;

/// The result vector of a claim of up to `max` tasks, allocated before the lock is taken so
/// the critical section does not (up to [`CLAIM_BUFFER`] tasks; a bigger claim grows it).
fn claim_buffer(max: usize) -> Vec<Task> {
    Vec::with_capacity(max.min(CLAIM_BUFFER))
}

#[async_trait]
impl Broker for MemoryBroker {
    fn backend(&self) -> &'static str {
        NAME
    }

    async fn init(&self, options: BrokerOptions) -> Result<()> {
        self.inner.life.init(options.resolve())
    }

    async fn close(&self) -> Result<()> {
        self.inner.life.close();
        Ok(())
    }

    async fn now(&self) -> Result<Timestamp> {
        Ok(self.inner.life.options()?.clock.now_ms())
    }

    async fn enqueue_many(&self, tasks: &[Task]) -> Result<Vec<Task>> {
        let limits = self.inner.life.options()?.limits;
        validate_tasks(tasks, &limits)?;
        self.write(|txn| txn.enqueue_batch(tasks))
    }

    async fn try_dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>> {
        let opts = self.inner.life.options()?;
        validate_claim(queues, max)?;
        let queues = queues.to_vec();
        let claimed = claim_buffer(max);
        self.store_write(&opts, |txn| txn.claim_into(&queues, max, claimed))?
    }

    async fn dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>> {
        let clock = self.inner.life.options()?.clock.clone();
        validate_claim(queues, max)?;
        let queues = queues.to_vec();
        let hub = &self.inner.store.hub;
        let probe = |_| std::future::ready(self.probe(&queues, max));
        // Memory wakes every waiter on each write (its looks are cheap): no counted wakes.
        wait_for_work(
            Waiting {
                hub,
                interest: Interest::default(),
                life: &self.inner.life,
                clock: &*clock,
                poll: None,
            },
            probe,
        )
        .await
    }

    async fn ack_many(&self, items: &[AckItem]) -> Result<Vec<Result<()>>> {
        let opts = self.inner.life.options()?;
        let checks = ops::check_ack_items(items, &opts.limits);
        self.store_write(&opts, |txn| txn.ack_many(items, checks))
    }

    async fn fail(&self, id: &str, token: &str, failure: Failure) -> Result<()> {
        self.inner.life.options()?;
        validate_id(id)?;
        taskgate::validate::validate_failure(&failure)?;
        self.write(|txn| txn.fail(id, token, &failure))
    }

    async fn cancel(&self, id: &str) -> Result<()> {
        self.inner.life.options()?;
        validate_id(id)?;
        self.write(|txn| txn.cancel(id))
    }

    async fn finish_canceled(&self, id: &str, token: &str) -> Result<()> {
        self.inner.life.options()?;
        validate_id(id)?;
        self.write(|txn| txn.finish_canceled(id, token))
    }

    async fn requeue(&self, id: &str, token: &str) -> Result<()> {
        self.inner.life.options()?;
        validate_id(id)?;
        self.write(|txn| txn.requeue(id, token))
    }

    async fn heartbeat(&self, id: &str, token: &str) -> Result<()> {
        self.inner.life.options()?;
        validate_id(id)?;
        self.write(|txn| txn.heartbeat(id, token))
    }

    async fn save_step(&self, id: &str, token: &str, step: Step) -> Result<()> {
        let limits = self.inner.life.options()?.limits;
        validate_id(id)?;
        validate_step(&step, &limits)?;
        self.write(|txn| txn.save_step(id, token, step))
    }

    async fn get(&self, id: &str) -> Result<Task> {
        self.inner.life.options()?;
        validate_id(id)?;
        self.read(|state| state.get(id))?
    }

    async fn replay(&self, request: ReplayRequest) -> Result<Task> {
        let limits = self.inner.life.options()?.limits;
        validate_replay_request(&request, &limits)?;
        self.write(|txn| txn.replay(&request))
    }

    async fn resume(&self, id: &str) -> Result<Task> {
        self.inner.life.options()?;
        validate_id(id)?;
        self.write(|txn| txn.resume(id))
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<Task>> {
        self.read(|state| state.list(filter))
    }

    async fn queue_len(&self, queue: &str) -> Result<u64> {
        self.read(|state| state.queue_len(queue))
    }

    async fn counts(&self) -> Result<Counts> {
        self.read(State::counts)
    }

    async fn reap_expired(&self) -> Result<u64> {
        self.write(|txn| txn.reap())
    }

    async fn pause_queue(&self, queue: &str) -> Result<()> {
        self.inner.life.options()?;
        validate_queue(queue)?;
        self.write(|txn| {
            txn.state.paused.insert(queue.to_owned());
            Ok(())
        })
    }

    async fn resume_queue(&self, queue: &str) -> Result<()> {
        self.inner.life.options()?;
        validate_queue(queue)?;
        self.write(|txn| {
            if txn.state.paused.remove(queue) {
                txn.wake_waiters();
            }
            Ok(())
        })
    }

    async fn paused_queues(&self) -> Result<Vec<String>> {
        self.read(|state| state.paused.iter().cloned().collect())
    }

    async fn prune(&self, request: PruneRequest) -> Result<u64> {
        let opts = self.inner.life.options()?;
        let rules = Rules {
            before: request.finished_before,
            statuses: prune_statuses(&request.statuses)?,
            include_keyed: request.include_keyed,
        };
        let mut units = self.read(|state| state.prune_units(&rules))?.into_iter().peekable();
        let mut left = if request.limit == 0 { usize::MAX } else { request.limit };
        let mut total = 0usize;
        while left > 0 && units.peek().is_some() {
            self.inner.life.options()?;
            let deleted = self.inner.store.lock()?.prune_batch(&mut units, &rules, left);
            total += deleted;
            left -= deleted;
        }
        self.inner.store.lock()?.prune_quota(opts.clock.now_ms().as_secs());
        Ok(u64::try_from(total).unwrap_or(u64::MAX))
    }

    async fn audited(&self, actor: &str, action: &AdminAction) -> Result<AdminOutcome> {
        let limits = self.inner.life.options()?.limits;
        validate_action(actor, action, &limits)?;
        // The action and its record in one critical section: both or neither.
        self.write(|txn| {
            let result = match action {
                AdminAction::Cancel { id } => txn.cancel(id).map(|()| AdminOutcome::Done),
                AdminAction::Resume { id } => txn.resume(id).map(|t| AdminOutcome::Task(t.into())),
                AdminAction::Replay(request) => {
                    txn.replay(request).map(|t| AdminOutcome::Task(t.into()))
                }
                AdminAction::PauseQueue { queue } => {
                    txn.state.paused.insert(queue.clone());
                    Ok(AdminOutcome::Done)
                }
                AdminAction::ResumeQueue { queue } => {
                    if txn.state.paused.remove(queue) {
                        txn.wake_waiters();
                    }
                    Ok(AdminOutcome::Done)
                }
            };
            if result.as_ref().err().is_none_or(records_rejection) {
                let record = record_for(actor, action, txn.now, result.as_ref());
                txn.state.audit.push(record);
            }
            result
        })
    }

    async fn audit_log(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        self.read(|state| {
            let matching = state.audit.iter().rev().filter(|r| query.matches(r)).skip(query.offset);
            let limit = if query.limit == 0 { usize::MAX } else { query.limit };
            matching.take(limit).cloned().collect()
        })
    }

    fn capabilities(&self) -> Capabilities {
        // Quota only: one process, nothing persisted, the local (or injected) clock.
        Capabilities::NONE.with_quota(true).with_audit(true)
    }

    fn limits(&self) -> Result<Limits> {
        // Memory holds whatever fits in the process: the configured limits, unlowered.
        Ok(self.inner.life.options()?.limits)
    }

    fn quota_provider(&self) -> Option<&dyn QuotaProvider> {
        Some(self)
    }
}

impl QuotaProvider for MemoryBroker {
    fn queue_quota(&self, queue: &str, config: &QuotaConfig) -> Result<Arc<dyn QuotaGate>> {
        let (key, period) = config.resolve(queue)?;
        Ok(Arc::new(quota::MemoryQuotaGate {
            handle: self.inner.clone(),
            key,
            period,
            limit: config.limit,
        }))
    }
}
