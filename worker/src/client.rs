//! The client side of a runtime (runtime spec §12.2): submit typed or raw jobs and groups of
//! jobs that depend on each other, wait for results, cancel, replay, read stats.

use std::any::Any;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use taskgate::{
    Broker, CallerTx, Counts, Filter, OnParentFailure, ReplayRequest, Status, Task, Timestamp,
    TxEnqueue,
};

use crate::inner::Inner;
use crate::job::{decode, encode, DEFAULT_MAX_RETRY};
use crate::{Error, Job, JobId, Result, SubmitOptions};

/// How often [`Client::wait`] re-reads a task that another process runs (real time; tasks
/// this process finishes wake the wait at once).
pub const WAIT_POLL: Duration = Duration::from_millis(50);

/// Submits jobs and reads their outcome. Cheap to clone; get one from
/// [`Runtime::client`](crate::Runtime::client) or [`JobContext::client`](crate::JobContext::client).
///
/// ```
/// # use std::sync::Arc;
/// # use serde::{Deserialize, Serialize};
/// # use taskgate_worker::{Config, Job, Runtime, JobError};
/// # #[derive(Serialize, Deserialize)] struct Add { a: i32, b: i32 }
/// # impl Job for Add { const KIND: &'static str = "add"; type Output = i32; }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let runtime = Runtime::builder(Arc::new(taskgate_memory::MemoryBroker::new()))
///     .register(|job: Add, _ctx| async move { Ok::<_, JobError>(job.a + job.b) })
///     .start()
///     .await?;
/// let client = runtime.client();
/// let id = client.submit(Add { a: 2, b: 3 }).await?;
/// assert_eq!(client.wait(&id).await?, 5);
/// runtime.shutdown(std::time::Duration::from_secs(5)).await?;
/// # Ok::<(), taskgate_worker::Error>(()) }).unwrap();
/// ```
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

/// A queue's state as this process sees it (runtime spec §12.2 `Stats`).
#[derive(Clone, Debug, PartialEq)]
pub struct QueueStats {
    /// Configured workers.
    pub workers: usize,
    /// Handlers running in this process.
    pub running: usize,
    /// Tasks this process claimed ahead and holds until a worker is free (they are `running`
    /// in the broker; see [`QueueConfig::prefetch`](crate::QueueConfig::prefetch)).
    pub claimed_ahead: usize,
    /// Pending and retrying tasks in the broker (delayed ones included).
    pub queue_len: u64,
    /// Configured handler starts per second (0 = unlimited).
    pub rps: f64,
    /// The last quota reservation found the window used up.
    pub quota_exhausted: bool,
    /// The quota storage failed: claims are stopped until it answers.
    pub quota_stalled: bool,
    /// The queue is paused (§E4).
    pub paused: bool,
}

impl Client {
    pub(crate) fn from_inner(inner: Arc<Inner>) -> Client {
        Client { inner }
    }

    /// The broker, for everything the client does not wrap.
    pub fn broker(&self) -> &Arc<dyn Broker> {
        &self.inner.broker
    }

    /// Submits `job` to its queue and returns its execution ID.
    pub async fn submit<J: Job>(&self, job: J) -> Result<JobId<J>> {
        self.submit_with(job, SubmitOptions::new()).await
    }

    /// Submits `job` with options (key, delay, retries, parents, owner, priority).
    pub async fn submit_with<J: Job>(&self, job: J, options: SubmitOptions) -> Result<JobId<J>> {
        let task = self.typed_task(&job, options)?;
        let stored = self.inner.broker.enqueue(&task).await?;
        Ok(JobId::from_raw(stored.id))
    }

    /// Submits `job` inside the caller's open database transaction `tx` (extensions §E15):
    /// the same task [`Client::submit_with`] builds (kind, queue routing from the config, JSON
    /// payload, retry budget), written by the backend's transactional enqueue. It is
    /// invisible to workers until the caller commits `tx` and gone if it rolls back.
    ///
    /// `tx` is the backend's own transaction as `pool.begin()` returns it:
    /// `sqlx::Transaction<'static, Sqlite>` (`SqliteBroker`), `…<'static, Postgres>`
    /// (`PgBroker`) or `…<'static, MySql>` (`MySqlBroker`), from the sqlx the backend
    /// re-exports. Another type is `InvalidInput { field: "transaction" }` naming both types;
    /// a broker without transactional enqueue (memory) is `InvalidInput` too.
    ///
    /// ```no_run
    /// # use serde::{Deserialize, Serialize};
    /// # use taskgate_worker::{Client, Job, SubmitOptions};
    /// # #[derive(Serialize, Deserialize)] struct Ship { order: u64 }
    /// # impl Job for Ship { const KIND: &'static str = "ship"; type Output = (); }
    /// # async fn demo<Tx: std::any::Any + Send>(client: Client, mut tx: Tx) -> taskgate_worker::Result<()> {
    /// // let mut tx = broker.pool().begin().await?;   // e.g. on a SqliteBroker
    /// // … write the order with `&mut *tx` …
    /// let id = client.submit_in(&mut tx, Ship { order: 42 }, SubmitOptions::new()).await?;
    /// // tx.commit().await?;                          // the job exists from here on
    /// # Ok(()) }
    /// ```
    pub async fn submit_in<J: Job, Tx: Any + Send>(
        &self,
        tx: &mut Tx,
        job: J,
        options: SubmitOptions,
    ) -> Result<JobId<J>> {
        let task = self.typed_task(&job, options)?;
        let stored = self.tx_enqueue()?.enqueue_in_tx(CallerTx::new(tx), &task).await?;
        Ok(JobId::from_raw(stored.id))
    }

    fn tx_enqueue(&self) -> Result<&dyn TxEnqueue> {
        let broker = &self.inner.broker;
        let reason = || format!("the {} broker cannot enqueue in a transaction", broker.backend());
        Ok(broker.tx_enqueue().ok_or_else(|| taskgate::Error::invalid("transaction", reason()))?)
    }

    /// Submits a task of type `kind` with a raw payload (routed by the config only).
    pub async fn submit_raw(
        &self,
        kind: &str,
        payload: Option<Vec<u8>>,
        options: SubmitOptions,
    ) -> Result<Task> {
        let task = self.task(kind, None, payload, DEFAULT_MAX_RETRY, options)?;
        Ok(self.inner.broker.enqueue(&task).await?)
    }

    /// A group of jobs submitted together in one atomic `enqueue_many`; members may depend on
    /// earlier members (fan-out and fan-in without a round trip per parent).
    pub fn group(&self) -> Group {
        Group { client: self.clone(), tasks: Vec::new(), added: 0, error: None }
    }

    fn typed_task<J: Job>(&self, job: &J, options: SubmitOptions) -> Result<Task> {
        let payload = encode("payload", J::KIND, job)?;
        self.task(J::KIND, J::QUEUE, Some(payload), J::MAX_RETRY, options)
    }

    fn task(
        &self,
        kind: &str,
        job_queue: Option<&str>,
        payload: Option<Vec<u8>>,
        max_retry: u32,
        o: SubmitOptions,
    ) -> Result<Task> {
        self.check_open()?;
        if kind.is_empty() {
            return Err(taskgate::Error::invalid("type", "must not be empty").into());
        }
        let queue = self.inner.config.queue_for(kind, job_queue)?;
        let run_at = match (o.run_at, o.delay) {
            (Some(at), _) => at,
            (None, Some(delay)) => self.inner.clock.now_ms().saturating_add(delay),
            (None, None) => Timestamp::ZERO,
        };
        let policy = match o.ignore_parent_failure {
            true => OnParentFailure::IgnoreParentFailure,
            false => OnParentFailure::FailFast,
        };
        let mut task = Task::new(kind, queue)
            .with_business_key(o.business_key)
            .with_run_at(run_at)
            .with_max_retry(o.max_retry.unwrap_or(max_retry))
            .with_depends_on(o.depends_on)
            .with_on_parent_failure(policy)
            .with_owner(o.owner)
            .with_priority(o.priority.unwrap_or(taskgate::DEFAULT_PRIORITY));
        task.payload = payload;
        Ok(task)
    }

    fn check_open(&self) -> Result<()> {
        match self.inner.shutting_down.is_cancelled() {
            true => Err(Error::Shutdown),
            false => Ok(()),
        }
    }

    /// Waits until the job completed and returns its output; a failed or cancelled job is
    /// [`Error::TaskFailed`]. Drop the future to stop waiting (the job keeps running).
    pub async fn wait<J: Job>(&self, id: &JobId<J>) -> Result<J::Output> {
        let task = self.wait_task(id.as_str()).await?;
        decode("result", J::KIND, task.result.as_deref())
    }

    /// Waits until the task is final: the completed task, or [`Error::TaskFailed`].
    pub async fn wait_task(&self, id: &str) -> Result<Task> {
        let mut finished = self.inner.finished_tx.subscribe();
        loop {
            finished.borrow_and_update();
            let task = self.inner.broker.get(id).await?;
            match task.status {
                Status::Completed => return Ok(task),
                Status::Failed | Status::Canceled => {
                    return Err(Error::TaskFailed {
                        id: task.id,
                        status: task.status,
                        last_error: task.last_error,
                    })
                }
                _ => {}
            }
            tokio::select! {
                _ = finished.changed() => {}
                () = tokio::time::sleep(WAIT_POLL) => {}
            }
        }
    }

    /// One task.
    pub async fn get(&self, id: &str) -> Result<Task> {
        Ok(self.inner.broker.get(id).await?)
    }

    /// Tasks matching `filter`.
    pub async fn list(&self, filter: &Filter) -> Result<Vec<Task>> {
        Ok(self.inner.broker.list(filter).await?)
    }

    /// Every execution of a business key, oldest first.
    pub async fn history(&self, business_key: &str) -> Result<Vec<Task>> {
        let filter = Filter { business_key: business_key.to_owned(), ..Filter::default() };
        self.list(&filter).await
    }

    /// Counts by type and status.
    pub async fn overview(&self) -> Result<Counts> {
        Ok(self.inner.broker.counts().await?)
    }

    /// Cancels a task. Waiting tasks are cancelled at once; a running one here has its
    /// handler's token cancelled at once, in another process at its next heartbeat. One
    /// claimed ahead here (held, not started) is finished as cancelled before this returns,
    /// without running; one held by another process when that process's next lease renewal
    /// learns of the cancel.
    pub async fn cancel(&self, id: &str) -> Result<()> {
        self.inner.broker.cancel(id).await?;
        crate::ahead::cancel_if_held(&self.inner, id).await;
        for exec in self.inner.running.get(id) {
            exec.mark(crate::running::USER_CANCELLED, true);
        }
        Ok(())
    }

    /// Runs a finished execution again as a new execution (contract §8.3).
    pub async fn replay(&self, request: ReplayRequest) -> Result<Task> {
        self.check_open()?;
        Ok(self.inner.broker.replay(request).await?)
    }

    /// Runs a failed or cancelled task again under its own ID (§E5).
    pub async fn resume(&self, id: &str) -> Result<Task> {
        self.check_open()?;
        Ok(self.inner.broker.resume(id).await?)
    }

    /// Stops claims from a queue, in every process (§E4).
    pub async fn pause_queue(&self, queue: &str) -> Result<()> {
        Ok(self.inner.broker.pause_queue(queue).await?)
    }

    /// Lets claims from a queue resume.
    pub async fn resume_queue(&self, queue: &str) -> Result<()> {
        Ok(self.inner.broker.resume_queue(queue).await?)
    }

    /// A queue's workers, running handlers (here), length, rate and quota flags. An unknown
    /// queue without a default queue is [`Error::UnknownQueue`].
    pub async fn stats(&self, queue: &str) -> Result<QueueStats> {
        let settings = self.inner.config.settings(queue)?;
        let local = self.inner.queues.get(queue);
        let flag = |f: fn(&crate::claim::QueueRt) -> bool| local.is_some_and(|q| f(q));
        Ok(QueueStats {
            workers: settings.workers,
            running: local.map_or(0, |q| q.active.load(Ordering::SeqCst)),
            claimed_ahead: local.map_or(0, |q| q.ahead.held()),
            queue_len: self.inner.broker.queue_len(queue).await?,
            rps: settings.rps,
            quota_exhausted: flag(|q| q.exhausted.load(Ordering::SeqCst)),
            quota_stalled: flag(|q| q.stalled.load(Ordering::SeqCst)),
            paused: self.inner.broker.paused_queues().await?.iter().any(|p| p == queue),
        })
    }
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client").field("backend", &self.inner.broker.backend()).finish()
    }
}

/// Jobs submitted together, all or nothing, in one `enqueue_many`. Members get their
/// execution IDs when added, so later members can depend on earlier ones.
///
/// ```
/// # use std::sync::Arc;
/// # use serde::{Deserialize, Serialize};
/// # use taskgate_worker::{Job, Runtime, SubmitOptions};
/// # #[derive(Serialize, Deserialize)] struct Fetch { url: String }
/// # impl Job for Fetch { const KIND: &'static str = "fetch"; type Output = usize; }
/// # #[derive(Serialize, Deserialize)] struct Merge;
/// # impl Job for Merge { const KIND: &'static str = "merge"; type Output = usize; }
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// # let runtime = Runtime::builder(Arc::new(taskgate_memory::MemoryBroker::new())).start().await?;
/// let mut group = runtime.client().group();
/// let a = group.add(Fetch { url: "a".into() }, SubmitOptions::new());
/// let b = group.add(Fetch { url: "b".into() }, SubmitOptions::new());
/// let merge = group.add(Merge, SubmitOptions::new().depends_on(&a).depends_on(&b));
/// let stored = group.submit().await?;
/// assert_eq!(stored.len(), 3);
/// assert_eq!(stored[2].id, merge.as_str());
/// assert_eq!(stored[2].status, taskgate::Status::Blocked);
/// # Ok::<(), taskgate_worker::Error>(()) }).unwrap();
/// ```
pub struct Group {
    client: Client,
    tasks: Vec<Task>,
    added: usize,
    error: Option<Error>,
}

impl Group {
    /// Adds a job; its ID is returned at once (errors surface at [`Group::submit`]).
    pub fn add<J: Job>(&mut self, job: J, options: SubmitOptions) -> JobId<J> {
        let built = self.client.typed_task(&job, options);
        JobId::from_raw(self.push(built))
    }

    /// Adds a raw task of type `kind`.
    pub fn add_raw(
        &mut self,
        kind: &str,
        payload: Option<Vec<u8>>,
        options: SubmitOptions,
    ) -> String {
        let built = self.client.task(kind, None, payload, DEFAULT_MAX_RETRY, options);
        self.push(built)
    }

    fn push(&mut self, built: Result<Task>) -> String {
        let id = taskgate::id::new_ulid();
        self.added += 1;
        match built {
            Ok(task) => self.tasks.push(task.with_id(id.clone())),
            Err(e) => {
                self.error.get_or_insert(e);
            }
        }
        id
    }

    /// How many members were added.
    pub fn len(&self) -> usize {
        self.added
    }

    /// True when nothing was added.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Stores every member in one atomic unit and returns the stored snapshots, in order.
    pub async fn submit(self) -> Result<Vec<Task>> {
        if let Some(e) = self.error {
            return Err(e);
        }
        self.client.check_open()?;
        Ok(self.client.inner.broker.enqueue_many(&self.tasks).await?)
    }
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group").field("tasks", &self.tasks.len()).finish()
    }
}
