//! [`SqlBroker`]: the whole [`Broker`] contract, written once for every SQL database and run on
//! a backend's [`Adapter`] and [`Dialect`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use taskgate::audit::{records_rejection, validate_action};
use taskgate::wake::{wait_for_work, Interest, Look, Probe, Waiting};
use taskgate::{
    validate, AckItem, AdminAction, AdminOutcome, AuditQuery, AuditRecord, Broker, BrokerOptions,
    Capabilities, Counts, Error, Failure, Filter, Limits, PruneRequest, QueueList, QueueStats,
    QuotaProvider, ReplayRequest, ResolvedOptions, Result, Step, StorageBound, Task, Timestamp,
};

use crate::adapter::{Adapter, SqlConn};
use crate::combine::{self, Combine};
use crate::core::{Core, BLOB_HEADROOM};
use crate::deliver::{claim_args, probe_and_claim};
use crate::dialect::Dialect;
use crate::migrate::{migrate, schema_status, Migration, SchemaStatus};
use crate::ops::ack::choose::{ack_valid, no_nul_token};
use crate::ops::enqueue::choose::{enqueue_error, enqueue_valid};
use crate::ops::{audit, enqueue, finish, prune, read, reap, replay};
use crate::quota::Provider;
use crate::tx::{Tx, TxFail};

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

    /// The schema under this broker's prefix ([`schema_status`]) on a session of its own.
    /// Needs no `init`: a broker constructed on a database without a schema answers
    /// `applied: None`.
    pub async fn schema_status(&self) -> taskgate::Result<SchemaStatus> {
        let dialect = &*self.core().dialect;
        let backend = |e| taskgate::Error::backend(dialect.name(), e);
        let mut session = self.adapter().session().await.map_err(backend)?;
        let status = schema_status(&mut *session, dialect, self.prefix(), self.migrations()).await;
        let closed = session.close().await;
        let status = status.map_err(backend)?;
        closed.map_err(backend)?;
        Ok(status)
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
            Err(e) => Err(enqueue_error(&self.core, e, Some(task)).await),
        }
    }

    fn opts(&self) -> Result<Arc<ResolvedOptions>> {
        self.core.life.options()
    }

    /// One look or claim of a claim call ([`probe_and_claim`]).
    async fn probe(
        &self,
        opts: &Arc<ResolvedOptions>,
        queues: &[String],
        max: usize,
        look: Look,
    ) -> Result<Probe> {
        probe_and_claim(&self.core, &self.combine, opts.clone(), queues.to_vec(), max, look).await
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
            let fits = limit.bytes.saturating_sub(BLOB_HEADROOM);
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
        enqueue_valid(&self.core, &opts, tasks).await
    }

    async fn try_dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>> {
        let opts = self.opts()?;
        let queues = claim_args(queues, max)?;
        match self.probe(&opts, &queues, max, Look::First).await? {
            Probe::Claimed(tasks) => Ok(tasks),
            // Idle, held, or an answer added later: nothing was claimed.
            _ => Ok(Vec::new()),
        }
    }

    async fn dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>> {
        let opts = self.opts()?;
        let queues = claim_args(queues, max)?;
        let core = &self.core;
        let poll = Some(core.poll_interval);
        let interest = Interest { queues: &queues, batch: max };
        wait_for_work(
            Waiting { hub: &core.hub, interest, life: &core.life, clock: &*opts.clock, poll },
            |look| self.probe(&opts, &queues, max, look),
        )
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
        let results = match (valid.is_empty(), combine::applies(&self.core)) {
            (true, _) => Vec::new(),
            (false, true) => {
                combine::ack_many(&self.core, &self.combine, opts.clone(), valid).await?
            }
            (false, false) => ack_valid(&self.core, &opts, &valid).await?,
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
