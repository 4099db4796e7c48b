//! [`SqlBroker`]: the whole [`Broker`] contract, written once for every SQL database and run on
//! a backend's [`Adapter`] and [`Dialect`].

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use taskgate::audit::{records_rejection, validate_action};
use taskgate::wake::{wait_for_work, Interest, Look, Probe};
use taskgate::{
    validate, AckItem, AdminAction, AdminOutcome, AuditQuery, AuditRecord, Broker, BrokerOptions,
    Capabilities, Counts, Error, Failure, Filter, Limits, PruneRequest, QueueList, QueueStats,
    QuotaProvider, ReplayRequest, ResolvedOptions, Result, Step, StorageBound, Task, Timestamp,
};
use tokio::sync::{oneshot, OwnedRwLockReadGuard};

use crate::combine::{self, Combine};
use crate::core::{Core, Tx, TxFail};
use crate::dialect::UniqueTarget;
use crate::migrate::{migrate, Migration};
use crate::ops::ack::{self, AckRun};
use crate::ops::{self, audit, claim, enqueue, finish, prune, read, reap, replay};
use crate::quota::Provider;
use crate::resolve::{self, LostAck};
use crate::{Adapter, Dialect, SqlConn};

/// How a backend configures the engine.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// Table prefix, validated with [`validate::validate_prefix`] before any SQL is built.
    pub prefix: String,
    /// How often a waiting claimer polls for other processes' writes (real time).
    pub poll_interval: Duration,
    /// The backend's embedded migrations, in version order.
    pub migrations: &'static [Migration],
    /// Run migrations on the first `init` (PostgreSQL, MySQL). SQLite migrates when the file
    /// is opened and sets this to false.
    pub migrate_on_init: bool,
    /// What the backend declares it supports ([`Broker::capabilities`]). The engine always
    /// has quota and audit, so `quota` and `audit` are set whatever the backend passes.
    pub capabilities: Capabilities,
}

/// The shared SQL broker. Backends wrap it in their public type (`SqliteBroker`, `PgBroker`,
/// `MySqlBroker`) and forward the [`Broker`] trait with [`delegate_broker!`](crate::delegate_broker).
///
/// Clones share one handle (one adapter, one lifecycle, one wake hub).
#[derive(Clone)]
pub struct SqlBroker {
    core: Arc<Core>,
    quota: Arc<Provider>,
    migrations: &'static [Migration],
    migrate_on_init: bool,
    migrated: Arc<AtomicBool>,
    capabilities: Capabilities,
    combine: Arc<Combine>,
}

impl std::fmt::Debug for SqlBroker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlBroker")
            .field("dialect", &self.core.dialect)
            .field("prefix", &self.core.prefix)
            .finish()
    }
}

impl SqlBroker {
    /// A broker on `adapter` speaking `dialect`. Fails with `InvalidInput { field: "prefix" }`
    /// on a bad prefix. Nothing touches the database until [`SqlBroker::migrate`] or an
    /// operation.
    pub fn new(
        adapter: Arc<dyn Adapter>,
        dialect: Arc<dyn Dialect>,
        config: EngineConfig,
    ) -> Result<SqlBroker> {
        validate::validate_prefix(&config.prefix)?;
        let core = Arc::new(Core::new(adapter, dialect, config.prefix, config.poll_interval));
        Ok(SqlBroker {
            quota: Arc::new(Provider(core.clone())),
            core,
            migrations: config.migrations,
            migrate_on_init: config.migrate_on_init,
            migrated: Arc::new(AtomicBool::new(false)),
            capabilities: config.capabilities.with_quota(true).with_audit(true),
            combine: Arc::default(),
        })
    }

    /// Applies the embedded migrations not yet recorded; returns the versions applied.
    pub async fn migrate(&self) -> Result<Vec<i64>> {
        let c = &self.core;
        let applied = migrate(&*c.adapter, &*c.dialect, &c.prefix, self.migrations)
            .await
            .map_err(|e| c.backend_error(e))?;
        self.migrated.store(true, Ordering::SeqCst);
        Ok(applied)
    }

    pub(crate) fn core(&self) -> &Core {
        &self.core
    }

    pub(crate) fn core_arc(&self) -> &Arc<Core> {
        &self.core
    }

    pub(crate) fn combine(&self) -> &Combine {
        &self.combine
    }

    /// True when concurrent claims and acks of this handle are combined
    /// ([`crate::combine`]): the adapter shares one writer, and no test hook waits for each
    /// call's own commit.
    fn combines(&self) -> bool {
        self.core.adapter.shares_writer() && !self.core.has_before_commit_hook()
    }

    /// The backend's embedded migrations, in version order.
    #[cfg(feature = "testing")]
    pub(crate) fn migrations(&self) -> &'static [Migration] {
        self.migrations
    }

    /// The table prefix.
    pub fn prefix(&self) -> &str {
        &self.core.prefix
    }

    /// The adapter this broker runs on.
    pub fn adapter(&self) -> &Arc<dyn Adapter> {
        &self.core.adapter
    }

    /// How many transactions this handle retried after a deadlock or lock timeout.
    pub fn tx_retries(&self) -> u64 {
        self.core.retries.load(Ordering::Relaxed)
    }

    /// Wakes this handle's waiting claimers (a backend's cross-process listener calls it).
    pub fn wake_waiters(&self) {
        self.core.hub.wake();
    }

    /// Installs (or removes) a hook called inside every write transaction after its writes
    /// and before its commit, with the operation's name (`"ack"`, …). A hook that panics
    /// simulates a crash before commit: the transaction rolls back.
    #[cfg(feature = "test-hooks")]
    pub fn set_before_commit_hook(&self, hook: Option<crate::core::BeforeCommitHook>) {
        *self.core.before_commit.write().unwrap_or_else(|p| p.into_inner()) = hook;
    }

    /// Claim and ack calls of this handle waiting to be combined (`combine.rs`; feature
    /// `test-hooks`): `(claims, acks)`.
    #[cfg(feature = "test-hooks")]
    pub fn combining_waiting(&self) -> (usize, usize) {
        self.combine.waiting()
    }

    /// Transactional enqueue (extensions §E15): runs the enqueue on `conn`, a connection inside
    /// the caller's open transaction. Nothing is committed here; the task is invisible to
    /// claimers until the caller commits and gone if it rolls back. Waiters in other handles
    /// find it by their next poll; Notify is not called (the commit is not observable here).
    pub async fn enqueue_on(&self, conn: &mut dyn SqlConn, task: &Task) -> Result<Task> {
        let opts = self.core.life.options()?;
        validate::validate_task(task, &opts.limits)?;
        let mut tx = Tx::new(conn, &self.core, &opts);
        let id = enqueue::assign_ids(std::slice::from_ref(task)).pop().unwrap_or_default();
        match enqueue::enqueue(&mut tx, task, &id).await {
            Ok(row) => Ok(row.task),
            Err(e) => Err(self.enqueue_error(e, Some(task)).await),
        }
    }

    fn opts(&self) -> Result<Arc<ResolvedOptions>> {
        self.core.life.options()
    }

    /// Translates an enqueue failure: unique violations become `TaskExists` (with the key's
    /// tail, re-read outside the failed transaction, when the chain-head index fired).
    async fn enqueue_error(&self, e: TxFail, task: Option<&Task>) -> Error {
        let TxFail::Db(db) = e else { return self.core.fail(e) };
        let target = self.core.dialect.unique_violation(&db, &self.core.prefix);
        let Some(target) = target else { return self.core.backend_error(db) };
        let id = task.map(|t| t.id.clone()).unwrap_or_default();
        let key = task.map(|t| t.business_key.as_str()).unwrap_or_default();
        match target {
            UniqueTarget::ChainHead | UniqueTarget::Unnamed if !key.is_empty() => {
                let existing = self.tail_outside(key).await;
                Error::TaskExists { id: String::new(), existing }
            }
            _ => Error::TaskExists { id, existing: None },
        }
    }

    async fn tail_outside(&self, key: &str) -> Option<taskgate::ExistingTask> {
        let sql = self.core.sql(enqueue::KEY_TAIL_SQL);
        let kinds = [crate::Kind::Text, crate::Kind::Text];
        let rows = self.core.adapter.read(&sql, &[key.into()], &kinds).await.ok()?;
        let (execution_id, status) = crate::ops::id_status(rows.first()?).ok()?;
        Some(taskgate::ExistingTask { business_key: key.to_owned(), execution_id, status })
    }

    /// One claim transaction on a spawned task, delivered through a guard that puts the
    /// tasks back to `pending` if nobody receives them (extensions §E0).
    async fn claim_detached(
        &self,
        opts: Arc<ResolvedOptions>,
        queues: Vec<String>,
        max: usize,
    ) -> Result<Vec<Task>> {
        let (sender, receiver) = oneshot::channel();
        let core = self.core.clone();
        // Held until the claimed tasks are delivered or requeued; `close` waits for it.
        let inflight = core.inflight.clone().try_read_owned().map_err(|_| Error::Closed)?;
        if self.combines() {
            return combine::claim(self, opts, queues, max, inflight).await;
        }
        tokio::spawn(async move {
            let refs: Vec<&str> = queues.iter().map(String::as_str).collect();
            let mut sender = sender;
            // Room under the dialect's bound on claimed rows in flight, held until the claim's
            // transaction has ended; a caller that leaves while it waits gets nothing claimed.
            let slot = match claim::claim_slot(&core, max, &mut sender).await {
                Ok(slot) => slot,
                Err(_) => return,
            };
            let result = if claim::autocommits(&core) {
                // One statement, its own transaction: nothing to wait for but a connection,
                // and a caller that left meanwhile gets nothing claimed.
                claim::claim_autocommit(&core, &opts, &refs, max, &|| sender.is_closed()).await
            } else {
                // A caller that gave up while the claim waited for a connection (the writer
                // lock, on SQLite) gets nothing claimed instead of a claim to undo.
                (core.tx(&opts, "dequeue").abandon(&mut sender))
                    .run(&(&refs[..], max), |tx, &(refs, max)| {
                        Box::pin(claim::claim(tx, refs, max))
                    })
                    .await
            };
            drop(slot);
            if matches!(result, Err(TxFail::Abandoned)) {
                return;
            }
            let result = result
                .map(|tasks| ClaimGuard {
                    core: core.clone(),
                    opts: opts.clone(),
                    tasks,
                    inflight: Some(inflight),
                })
                .map_err(|e| core.fail(e));
            // If the receiver is gone the guard comes back here and is dropped: it requeues.
            let _ = sender.send(result);
        });
        let result = receiver
            .await
            .map_err(|_| Error::backend(self.core.name(), "claim task ended without a result"))?;
        Ok(result?.take())
    }

    async fn probe_and_claim(
        &self,
        opts: Arc<ResolvedOptions>,
        queues: Vec<String>,
        max: usize,
        look: Look,
    ) -> Result<Probe> {
        self.opts()?;
        // Claim at once after a full batch (more is likely ready) and, where a claim that
        // finds nothing costs no more than a look (one autocommit statement that writes no
        // row), after a wake-up: one round trip less between a commit and its pickup.
        // Otherwise look first, so an empty poll is a read, not a write transaction. A claim
        // at once that finds nothing looks next, for the time of the next due task.
        //
        // A claim that gets nothing where the look saw ready work while other claims of this
        // handle on the same queues were under way was held off by them (SKIP LOCKED, or on
        // SQLite claims that took the rows after the look's snapshot): the caller waits for a
        // wake-up ([`Probe::Held`]) instead of looking again within milliseconds. With many
        // claimers on a small backlog those re-looks were most of the claim traffic (finding
        // 28).
        let full = self.core.last_claim_full.load(Ordering::Relaxed);
        let mut look_first = !(full || (look == Look::Woken && claim::autocommits(&self.core)));
        let others = || self.core.claims_running.any(&queues);
        let mut at_once_found_none = false;
        loop {
            if look_first {
                let refs: Vec<&str> = queues.iter().map(String::as_str).collect();
                let probe = claim::probe(&self.core, &opts, &refs).await?;
                if let Some(next_due_in) = probe.wait() {
                    return Ok(Probe::Idle { next_due_in });
                }
                // The claim at once found nothing, yet the look sees ready rows: with other
                // claims of this handle on these queues under way, those hold them (or the rows
                // are new, and their wake-up reaches the waiter this call is about to be).
                if at_once_found_none && others() {
                    return Ok(Probe::Held);
                }
            }
            // Counted per queue while under way ([`Core::claims_running`]). A claim that
            // failed (its transaction rolled back) wakes every waiter: rows it held are ready
            // again, and the waiters it held ([`Probe::Held`]) get no other wake-up for them.
            let running = self.core.claims_running.enter(&queues);
            let claimed = self.claim_detached(opts.clone(), queues.clone(), max).await;
            drop(running);
            if claimed.as_ref().is_err_and(|e| !matches!(e, Error::Closed)) {
                self.core.hub.wake();
            }
            let claimed = claimed?;
            self.core.last_claim_full.store(claimed.len() == max, Ordering::Relaxed);
            if !claimed.is_empty() {
                return Ok(Probe::Claimed(claimed));
            }
            if look_first {
                return Ok(if others() { Probe::Held } else { Probe::Claimed(claimed) });
            }
            look_first = true;
            at_once_found_none = true;
        }
    }

    fn claim_args(queues: &dyn QueueList, max: usize) -> Result<Vec<String>> {
        validate::validate_claim(queues, max)?;
        Ok(queues.iter().map(str::to_owned).collect())
    }
}

/// Claimed tasks in transit to the caller; dropped undelivered, it requeues them.
pub(crate) struct ClaimGuard {
    core: Arc<Core>,
    opts: Arc<ResolvedOptions>,
    tasks: Vec<Task>,
    inflight: Option<OwnedRwLockReadGuard<()>>,
}

impl ClaimGuard {
    /// Tasks claimed for one caller, holding off `close` until delivered or requeued.
    pub(crate) fn new(
        core: Arc<Core>,
        opts: Arc<ResolvedOptions>,
        tasks: Vec<Task>,
        inflight: OwnedRwLockReadGuard<()>,
    ) -> ClaimGuard {
        ClaimGuard { core, opts, tasks, inflight: Some(inflight) }
    }

    pub(crate) fn take(mut self) -> Vec<Task> {
        self.inflight = None;
        std::mem::take(&mut self.tasks)
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let tasks = std::mem::take(&mut self.tasks);
        if tasks.is_empty() {
            return;
        }
        let (core, opts) = (self.core.clone(), self.opts.clone());
        let inflight = self.inflight.take();
        let requeue = async move {
            let unclaim = core.tx(&opts, "unclaim");
            let _ = unclaim.run(&tasks[..], |tx, tasks| Box::pin(claim::unclaim(tx, tasks))).await;
            drop(inflight);
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(requeue);
        }
    }
}

#[async_trait]
impl Broker for SqlBroker {
    fn backend(&self) -> &'static str {
        self.core.name()
    }

    async fn init(&self, options: BrokerOptions) -> Result<()> {
        if self.core.life.is_closed() {
            return Err(Error::Closed);
        }
        if self.migrate_on_init && !self.migrated.load(Ordering::SeqCst) {
            self.migrate().await?;
        }
        let limit = self.core.adapter.statement_limit().await;
        let limit = limit.map_err(|e| self.core.backend_error(e))?;
        self.core.set_statement_limit(limit);
        let mut resolved = options.resolve();
        if let Some(limit) = limit {
            // The largest value that still fits in one statement beside an ID (the engine
            // splits statements that carry more, see `ops::enqueue::insert_rows`).
            let fits = limit.bytes.saturating_sub(crate::core::BLOB_HEADROOM);
            let bound = StorageBound { setting: limit.setting, value: limit.bytes };
            let cap = usize::try_from(fits).unwrap_or(usize::MAX);
            resolved.limits = resolved.limits.capped(cap, bound);
        }
        self.core.life.init(resolved)
    }

    async fn close(&self) -> Result<()> {
        if self.core.life.close() {
            // Claims in flight finish (delivered or requeued) before the pools close.
            let _drained = self.core.inflight.write().await;
            self.core.adapter.close().await;
        }
        Ok(())
    }

    async fn now(&self) -> Result<Timestamp> {
        let opts = self.opts()?;
        match self.core.local_now(&opts) {
            Some(now) => Ok(now),
            None => read::now(&self.core).await,
        }
    }

    async fn enqueue_many(&self, tasks: &[Task]) -> Result<Vec<Task>> {
        let opts = self.opts()?;
        validate::validate_tasks(tasks, &opts.limits)?;
        // The IDs are chosen once: every attempt stores the same rows under them. A call that
        // repeats one this handle could not settle takes that call's IDs and lost attempts.
        let (ids, mut unknown) = match self.core.unresolved.take_enqueue(tasks) {
            Some(earlier) => (earlier.ids, earlier.attempts),
            None => (enqueue::assign_ids(tasks), Vec::new()),
        };
        if let ([task], [id], true) = (tasks, &ids[..], unknown.is_empty()) {
            if enqueue::fits_one_statement(task) && ops::one_statement_writes(&self.core, &opts) {
                let now = self.core.local_now(&opts);
                match enqueue::enqueue_autocommit(&self.core, task, id, now).await {
                    Ok(stored) => return Ok(vec![stored]),
                    // Nothing written, or (connection lost) maybe the row: the transaction
                    // runs next under the same ID, and a row found there settles it.
                    Err(e) if self.core.maybe_applied(&e) => {
                        unknown.push(enqueue::lost_one_statement(task, id, now));
                    }
                    Err(_) => {}
                }
            }
        }
        let done = (self.core.tx(&opts, "enqueue_many").settle(&mut unknown))
            .run(&(tasks, &ids[..]), |tx, &(tasks, ids)| {
                Box::pin(enqueue::enqueue_many(tx, tasks, ids))
            })
            .await;
        match done {
            Ok(stored) => Ok(stored),
            Err(e) if !unknown.is_empty() => {
                self.settle_enqueue(&opts, tasks, ids, unknown, e).await
            }
            // A batch of one (what `enqueue` sends) knows which task hit a unique index.
            Err(e) => Err(self
                .enqueue_error(e, if tasks.len() == 1 { tasks.first() } else { None })
                .await),
        }
    }

    async fn try_dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>> {
        let opts = self.opts()?;
        let queues = Self::claim_args(queues, max)?;
        match self.probe_and_claim(opts, queues, max, Look::First).await? {
            Probe::Claimed(tasks) => Ok(tasks),
            // Idle, held, or an answer added later: nothing was claimed.
            _ => Ok(Vec::new()),
        }
    }

    async fn dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>> {
        let opts = self.opts()?;
        let queues = Self::claim_args(queues, max)?;
        let core = &self.core;
        let poll = Some(core.poll_interval);
        let interest = Interest { queues: &queues, batch: max };
        wait_for_work(&core.hub, interest, &core.life, &*opts.clock, poll, |look| {
            self.probe_and_claim(opts.clone(), queues.clone(), max, look)
        })
        .await
    }

    async fn ack_many(&self, items: &[AckItem]) -> Result<Vec<Result<()>>> {
        let opts = self.opts()?;
        let mut outcomes: Vec<Option<Result<()>>> = items
            .iter()
            .map(|i| validate::validate_ack_item(i, &opts.limits).err().map(Err))
            .collect();
        let valid: Vec<AckItem> = items
            .iter()
            .zip(&outcomes)
            .filter(|(_, o)| o.is_none())
            .map(|(i, _)| no_nul_token(i))
            .collect();
        let results = match (valid.is_empty(), self.combines()) {
            (true, _) => Vec::new(),
            (false, true) => combine::ack_many(self, opts.clone(), valid).await?,
            (false, false) => self.ack_valid(&opts, &valid).await?,
        };
        let mut results = results.into_iter();
        for slot in &mut outcomes {
            if slot.is_none() {
                *slot = results.next();
            }
        }
        Ok(outcomes.into_iter().map(|o| o.unwrap_or(Ok(()))).collect())
    }

    async fn fail(&self, id: &str, token: &str, failure: Failure) -> Result<()> {
        let opts = self.opts()?;
        validate::validate_id(id)?;
        validate::validate_failure(&failure)?;
        let done = (self.core.tx(&opts, "fail"))
            .run(&(id, token, &failure), |tx, &(id, token, failure)| {
                Box::pin(finish::fail(tx, id, token, failure))
            })
            .await;
        done.map_err(|e| self.core.fail(e))
    }

    async fn cancel(&self, id: &str) -> Result<()> {
        let opts = self.opts()?;
        validate::validate_id(id)?;
        let done =
            self.core.tx(&opts, "cancel").run(id, |tx, id| Box::pin(finish::cancel(tx, id))).await;
        done.map_err(|e| self.core.fail(e))
    }

    async fn finish_canceled(&self, id: &str, token: &str) -> Result<()> {
        let opts = self.opts()?;
        validate::validate_id(id)?;
        let done = (self.core.tx(&opts, "finish_canceled"))
            .run(&(id, token), |tx, &(id, token)| Box::pin(finish::finish_canceled(tx, id, token)))
            .await;
        done.map_err(|e| self.core.fail(e))
    }

    async fn requeue(&self, id: &str, token: &str) -> Result<()> {
        let opts = self.opts()?;
        validate::validate_id(id)?;
        let done = (self.core.tx(&opts, "requeue"))
            .run(&(id, token), |tx, &(id, token)| Box::pin(finish::requeue(tx, id, token)))
            .await;
        done.map_err(|e| self.core.fail(e))
    }

    async fn heartbeat(&self, id: &str, token: &str) -> Result<()> {
        let opts = self.opts()?;
        validate::validate_id(id)?;
        let done = (self.core.tx(&opts, "heartbeat"))
            .run(&(id, token), |tx, &(id, token)| Box::pin(finish::heartbeat(tx, id, token)))
            .await;
        match done.map_err(|e| self.core.fail(e))? {
            true => Err(Error::Canceled { id: id.to_owned() }),
            false => Ok(()),
        }
    }

    async fn save_step(&self, id: &str, token: &str, step: Step) -> Result<()> {
        let opts = self.opts()?;
        validate::validate_id(id)?;
        validate::validate_step(&step, &opts.limits)?;
        let done = (self.core.tx(&opts, "save_step"))
            .run(&(id, token, &step), |tx, &(id, token, step)| {
                Box::pin(finish::save_step(tx, id, token, step))
            })
            .await;
        match done.map_err(|e| self.core.fail(e))? {
            true => Err(Error::Canceled { id: id.to_owned() }),
            false => Ok(()),
        }
    }

    async fn get(&self, id: &str) -> Result<Task> {
        self.opts()?;
        validate::validate_id(id)?;
        read::get(&self.core, id).await?.ok_or_else(|| Error::not_found(id))
    }

    async fn replay(&self, request: ReplayRequest) -> Result<Task> {
        let opts = self.opts()?;
        validate::validate_replay_request(&request, &opts.limits)?;
        let done = (self.core.tx(&opts, "replay"))
            .run(&request, |tx, request| Box::pin(replay::replay(tx, request)))
            .await;
        done.map_err(|e| match e {
            TxFail::Db(db)
                if self.core.dialect.unique_violation(&db, &self.core.prefix).is_some() =>
            {
                let target = if request.execution_id.is_empty() {
                    request.business_key.clone()
                } else {
                    request.execution_id.clone()
                };
                Error::AlreadyReplayed { id: target }
            }
            other => self.core.fail(other),
        })
    }

    async fn resume(&self, id: &str) -> Result<Task> {
        let opts = self.opts()?;
        validate::validate_id(id)?;
        let done =
            self.core.tx(&opts, "resume").run(id, |tx, id| Box::pin(replay::resume(tx, id))).await;
        done.map_err(|e| self.core.fail(e))
    }

    async fn list(&self, filter: &Filter) -> Result<Vec<Task>> {
        self.opts()?;
        read::list(&self.core, filter).await
    }

    async fn queue_len(&self, queue: &str) -> Result<u64> {
        self.opts()?;
        read::queue_len(&self.core, queue).await
    }

    async fn counts(&self) -> Result<Counts> {
        self.opts()?;
        read::counts(&self.core).await
    }

    async fn reap_expired(&self) -> Result<u64> {
        let opts = self.opts()?;
        let done = self.core.tx(&opts, "reap").run(&(), |tx, ()| Box::pin(reap::reap(tx))).await;
        done.map_err(|e| self.core.fail(e))
    }

    async fn pause_queue(&self, queue: &str) -> Result<()> {
        let opts = self.opts()?;
        validate::validate_queue(queue)?;
        let done = (self.core.tx(&opts, "pause_queue"))
            .run(queue, |tx, queue| Box::pin(finish::pause_queue(tx, queue)))
            .await;
        done.map_err(|e| self.core.fail(e))
    }

    async fn resume_queue(&self, queue: &str) -> Result<()> {
        let opts = self.opts()?;
        validate::validate_queue(queue)?;
        let done = (self.core.tx(&opts, "resume_queue"))
            .run(queue, |tx, queue| Box::pin(finish::resume_queue(tx, queue)))
            .await;
        done.map_err(|e| self.core.fail(e))
    }

    async fn paused_queues(&self) -> Result<Vec<String>> {
        self.opts()?;
        read::paused_queues(&self.core).await
    }

    async fn prune(&self, request: PruneRequest) -> Result<u64> {
        let opts = self.opts()?;
        let statuses = validate::prune_statuses(&request.statuses)?;
        let mut total = 0u64;
        let mut budget = if request.limit == 0 { usize::MAX } else { request.limit };
        let mut first = true;
        while budget > 0 {
            let args = (&request, &statuses[..], budget, first);
            let done = (self.core.tx(&opts, "prune"))
                .run(&args, |tx, &(request, statuses, budget, first)| {
                    Box::pin(prune::prune_batch(tx, request, statuses, budget, first))
                })
                .await;
            let n = done.map_err(|e| self.core.fail(e))?;
            first = false;
            total += n;
            budget = budget.saturating_sub(usize::try_from(n).unwrap_or(usize::MAX));
            if n == 0 {
                break;
            }
        }
        Ok(total)
    }

    async fn queue_stats(&self) -> Result<Vec<QueueStats>> {
        self.opts()?;
        read::queue_stats(&self.core).await
    }

    async fn audited(&self, actor: &str, action: &AdminAction) -> Result<AdminOutcome> {
        let opts = self.opts()?;
        validate_action(actor, action, &opts.limits)?;
        let done = (self.core.tx(&opts, "audited"))
            .run(&(actor, action), |tx, &(actor, action)| {
                Box::pin(audit::audited(tx, actor, action))
            })
            .await;
        let error = match done {
            Ok(outcome) => return Ok(outcome),
            Err(TxFail::Db(db)) => match action {
                AdminAction::Replay(r)
                    if self.core.dialect.unique_violation(&db, &self.core.prefix).is_some() =>
                {
                    let target =
                        if r.execution_id.is_empty() { &r.business_key } else { &r.execution_id };
                    Error::AlreadyReplayed { id: target.clone() }
                }
                _ => self.core.fail(TxFail::Db(db)),
            },
            Err(e) => self.core.fail(e),
        };
        if records_rejection(&error) {
            // The action's transaction rolled back; its rejection is recorded on its own.
            let recorded = (self.core.tx(&opts, "audit_rejected"))
                .run(&(actor, action, &error), |tx, &(actor, action, error)| {
                    Box::pin(audit::rejected(tx, actor, action, error))
                })
                .await;
            recorded.map_err(|e| self.core.fail(e))?;
        }
        Err(error)
    }

    async fn audit_log(&self, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
        self.opts()?;
        audit::log(&self.core, query).await
    }

    fn capabilities(&self) -> Capabilities {
        self.capabilities
    }

    fn limits(&self) -> Result<Limits> {
        Ok(self.opts()?.limits)
    }

    fn quota_provider(&self) -> Option<&dyn QuotaProvider> {
        Some(&*self.quota)
    }
}

impl SqlBroker {
    /// Settles an enqueue whose attempt's COMMIT was lost (`unknown`) and whose last attempt
    /// failed with `e`: the rows under `ids`, read back, tell whether a lost attempt was
    /// applied — then the call succeeded with what that attempt stored (its Notify snapshots
    /// are published now). Otherwise `e` stands; when `e` itself is an unknown outcome, or the
    /// rows cannot be read, the call is remembered so that repeating it settles it.
    async fn settle_enqueue(
        &self,
        opts: &ResolvedOptions,
        tasks: &[Task],
        ids: Vec<String>,
        unknown: Vec<crate::core::Settled<Vec<Task>>>,
        e: TxFail,
    ) -> Result<Vec<Task>> {
        let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
        let stored = read::by_ids(&self.core, &refs).await;
        let e = match (stored, e) {
            (Ok(stored), e) => {
                if let Some(i) = resolve::applied_enqueue(&stored, &unknown) {
                    let (mut value, snapshots, wakes) =
                        unknown.into_iter().nth(i).unwrap_or_default();
                    resolve::fill_server_times(&mut value, &stored);
                    self.core.hub.wake_for(&wakes);
                    if wakes.any() {
                        // Other processes were not told at the lost commit.
                        self.core.adapter.woke();
                    }
                    opts.notifier.publish(snapshots);
                    return Ok(value);
                }
                if !matches!(e, TxFail::Unknown(_)) {
                    let single = if tasks.len() == 1 { tasks.first() } else { None };
                    return Err(self.enqueue_error(e, single).await);
                }
                e
            }
            (Err(read), TxFail::Unknown(lost)) => {
                drop(read);
                TxFail::Unknown(lost)
            }
            // A lost attempt may have been applied and cannot be read: unknown, not `read`.
            (Err(read), _) => {
                self.core.unresolved.put_enqueue(resolve::UnsettledEnqueue {
                    input: tasks.to_vec(),
                    ids,
                    attempts: unknown,
                });
                return Err(self.core.unknown(read));
            }
        };
        self.core.unresolved.put_enqueue(resolve::UnsettledEnqueue {
            input: tasks.to_vec(),
            ids,
            attempts: unknown,
        });
        Err(self.core.fail(e))
    }

    /// Acks validated `items` in chunks; each item's outcome in order. Where
    /// [`ack::autocommits`], a chunk's childless items are completed first by one autocommit
    /// statement; the rest (and all of a chunk that statement could not take) run in one
    /// transaction.
    pub(crate) async fn ack_valid(
        &self,
        opts: &ResolvedOptions,
        valid: &[AckItem],
    ) -> Result<Vec<Result<()>>> {
        let mut results = Vec::with_capacity(valid.len());
        let autocommits = ack::autocommits(&self.core, opts);
        for chunk in valid.chunks(self.ack_chunk()) {
            // What an earlier call of this handle, whose outcome is unknown, wrote per item.
            let mut earlier = self.core.unresolved.take_acks(chunk);
            if !(autocommits && ack::fits_one_statement(chunk)) {
                results.extend(self.ack_in_tx(opts, chunk, earlier).await?);
                continue;
            }
            let acked =
                match ack::ack_autocommit(&self.core, chunk, self.core.local_now(opts)).await {
                    Ok(acked) => acked,
                    Err(e) => {
                        // Nothing written, or (connection lost) maybe all of it: the transaction
                        // acks what is left, and `ack_token` tells the lost statement's work.
                        if self.core.maybe_applied(&e) {
                            earlier.iter_mut().for_each(|lost| lost.autocommit = true);
                        }
                        HashSet::new()
                    }
                };
            let (mut rest, mut rest_earlier) = (Vec::new(), Vec::new());
            for (item, lost) in chunk.iter().zip(earlier) {
                if !acked.contains(&item.id) {
                    rest.push(item.clone());
                    rest_earlier.push(lost);
                }
            }
            let mut rest_outcomes = match rest.is_empty() {
                true => Vec::new(),
                false => self.ack_in_tx(opts, &rest, rest_earlier).await?,
            }
            .into_iter();
            for item in chunk {
                let outcome = match acked.contains(&item.id) {
                    true => Ok(()),
                    false => rest_outcomes.next().unwrap_or_else(|| {
                        Err(Error::backend(self.core.name(), "an ack item got no outcome"))
                    }),
                };
                results.push(outcome);
            }
        }
        Ok(results)
    }

    /// Acks `chunk` in one transaction (settling lost COMMITs, [`Self::settle_acks`]).
    async fn ack_in_tx(
        &self,
        opts: &ResolvedOptions,
        chunk: &[AckItem],
        earlier: Vec<LostAck>,
    ) -> Result<Vec<Result<()>>> {
        let returning = self.ack_returning();
        let mut unknown = Vec::new();
        let lost = earlier.iter().any(|lost| !lost.is_empty());
        let done = (self.core.tx(opts, "ack").settle(&mut unknown).after_lost(lost))
            .run(&(chunk, returning), |tx, &(chunk, returning)| {
                Box::pin(ack::ack_many(tx, chunk, returning))
            })
            .await;
        self.settle_acks(opts, chunk, earlier, unknown, done).await
    }

    /// Settles one ack transaction's outcome. `done` is the last attempt's; `unknown` the
    /// attempts whose COMMIT was lost, `earlier` what lost attempts of this or an earlier call
    /// wrote per item. An item the last attempt found no longer running with its token
    /// (LeaseLost) is `Ok` when a lost attempt was applied: the task is completed with exactly
    /// the `finished_at` a lost transaction wrote and the item's result (its Notify snapshots
    /// are published now), or its `ack_token` is the item's token (a lost one-statement ack).
    /// When the outcome stays unknown, what each item's lost attempts wrote is remembered so
    /// that repeating the ack settles it.
    pub(crate) async fn settle_acks(
        &self,
        opts: &ResolvedOptions,
        chunk: &[AckItem],
        earlier: Vec<LostAck>,
        unknown: Vec<crate::core::Settled<AckRun>>,
        done: std::result::Result<AckRun, TxFail>,
    ) -> Result<Vec<Result<()>>> {
        // Per item: what lost attempts wrote for it.
        let mut wrote = earlier;
        for ((outcomes, now), _, _) in &unknown {
            for (i, outcome) in outcomes.iter().enumerate() {
                if let (Ok(()), Some(now), Some(w)) = (outcome, now, wrote.get_mut(i)) {
                    w.finished.push(*now);
                }
            }
        }
        // A call that cannot settle is remembered, so that repeating it settles it, and fails
        // as unknown when a lost attempt may have acked an item: never with a definite error.
        let unsettled = |wrote: &[LostAck], e: Error| {
            let mut lost = false;
            for (item, w) in chunk.iter().zip(wrote) {
                if !w.is_empty() {
                    lost = true;
                    self.core.unresolved.put_ack(&item.id, &item.token, w.clone());
                }
            }
            match e {
                Error::Backend { source, .. } if lost && !is_unknown_source(&*source) => {
                    self.core.unknown(source)
                }
                e => e,
            }
        };
        let mut outcomes = match done {
            Ok((outcomes, _)) => outcomes,
            Err(e) => return Err(unsettled(&wrote, self.core.fail(e))),
        };
        let suspects: Vec<usize> = (0..chunk.len())
            .filter(|i| {
                matches!(outcomes.get(*i), Some(Err(Error::LeaseLost { .. })))
                    && wrote.get(*i).is_some_and(|w| !w.is_empty())
            })
            .collect();
        if suspects.is_empty() {
            return Ok(outcomes);
        }
        let by_token: Vec<&str> = (suspects.iter())
            .filter(|i| wrote.get(**i).is_some_and(|w| w.autocommit))
            .map(|i| chunk[*i].id.as_str())
            .collect();
        if !by_token.is_empty() {
            let tokens = match read::ack_tokens(&self.core, &by_token).await {
                Ok(tokens) => tokens,
                Err(read) => return Err(unsettled(&wrote, read)),
            };
            for i in &suspects {
                let item = &chunk[*i];
                if tokens.get(&item.id).is_some_and(|t| *t == item.token) {
                    outcomes[*i] = Ok(());
                }
            }
        }
        // What `ack_token` settled needs no second read.
        let suspects: Vec<usize> = (suspects.into_iter())
            .filter(|i| matches!(outcomes.get(*i), Some(Err(Error::LeaseLost { .. }))))
            .filter(|i| wrote.get(*i).is_some_and(|w| !w.finished.is_empty()))
            .collect();
        if suspects.is_empty() {
            return Ok(outcomes);
        }
        let ids: Vec<&str> = suspects.iter().map(|i| chunk[*i].id.as_str()).collect();
        let stored = match read::by_ids(&self.core, &ids).await {
            Ok(stored) => stored,
            Err(read) => return Err(unsettled(&wrote, read)),
        };
        let mut applied: Vec<Timestamp> = Vec::new();
        for i in suspects {
            let item = &chunk[i];
            let Some(task) = stored.get(&item.id) else { continue };
            let finished = task.finished_at.filter(|at| wrote[i].finished.contains(at));
            if task.status == taskgate::Status::Completed && task.result == item.result {
                if let Some(at) = finished {
                    outcomes[i] = Ok(());
                    applied.push(at);
                }
            }
        }
        // The lost attempt that was applied committed whole: publish what it would have.
        for ((_, now), snapshots, wakes) in unknown {
            if now.is_some_and(|now| applied.contains(&now)) {
                self.core.hub.wake_for(&wakes);
                opts.notifier.publish(snapshots);
            }
        }
        Ok(outcomes)
    }

    /// True when acks use the one-statement form, which binds every result in one statement:
    /// with a server statement limit, the two-step form splits the write instead.
    pub(crate) fn ack_returning(&self) -> bool {
        self.core.dialect.update_returning() && self.core.statement_budget().is_none()
    }

    /// Items per ack transaction, so one statement stays under the dialect's parameter limit.
    pub(crate) fn ack_chunk(&self) -> usize {
        (self.core.dialect.max_params() / 4).clamp(1, 1_000)
    }
}

/// True when a `Backend` error's source already says that a write's outcome is unknown
/// ([`CommitUnknown`](crate::CommitUnknown)).
fn is_unknown_source(source: &(dyn std::error::Error + 'static)) -> bool {
    source.is::<crate::core::CommitUnknown>()
}

/// `item`, with a token holding a NUL replaced by the empty token: no lease token holds one
/// (contract §E7.3), so it is answered as any token that is not the current one (`LeaseLost`,
/// or `NotFound` for an unknown ID) without being sent to a server whose text cannot carry it.
fn no_nul_token(item: &AckItem) -> AckItem {
    let mut item = item.clone();
    if validate::has_nul(&item.token) {
        item.token.clear();
    }
    item
}
