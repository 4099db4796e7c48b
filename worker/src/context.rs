//! What a handler sees of its execution: the claimed task, a cancellation token, lease
//! renewal for manual heartbeats, and checkpoints for stepwise jobs (runtime spec §12.4,
//! extensions §E3).

use std::sync::Arc;

use serde::de::DeserializeOwned;
use taskgate::{ErrorKind, Step, Task};
use tokio_util::sync::CancellationToken;

use crate::inner::Inner;
use crate::job::decode;
use crate::running::{Exec, LEASE_LOST, RELEASED, USER_CANCELLED};
use crate::{Client, Error, Result};

/// A handler's view of the execution it runs. Cheap to clone (hand it to sub-tasks).
///
/// ```
/// # use taskgate_worker::{JobContext, JobError};
/// async fn import(ctx: JobContext) -> Result<Option<Vec<u8>>, JobError> {
///     for page in 0..100 {
///         if ctx.is_cancelled() {
///             return Err(JobError::msg(format!("stopped at page {page}")));
///         }
///         // ... work on `page`, then keep the lease if heartbeats are manual:
///         ctx.renew_lease().await?;
///     }
///     Ok(None)
/// }
/// ```
#[derive(Clone)]
pub struct JobContext {
    shared: Arc<Shared>,
}

struct Shared {
    task: Task,
    exec: Arc<Exec>,
    inner: Arc<Inner>,
}

impl JobContext {
    pub(crate) fn new(task: Task, exec: Arc<Exec>, inner: Arc<Inner>) -> Self {
        JobContext { shared: Arc::new(Shared { task, exec, inner }) }
    }

    /// The task as claimed (counters as of this claim, cursor of the last step, parents).
    pub fn task(&self) -> &Task {
        &self.shared.task
    }

    /// The execution ID: stable across retries and re-runs, so it is the idempotency key for
    /// side effects.
    pub fn id(&self) -> &str {
        &self.shared.task.id
    }

    /// Business failures before this run (0 on the first run).
    pub fn attempts(&self) -> u32 {
        self.shared.task.attempts
    }

    /// The raw payload.
    pub fn payload(&self) -> Option<&[u8]> {
        self.shared.task.payload.as_deref()
    }

    /// The cursor of the last saved step, if any.
    pub fn cursor(&self) -> Option<&[u8]> {
        self.shared.task.cursor.as_deref()
    }

    /// The cursor of the last saved step decoded from JSON (`None` before the first step).
    pub fn cursor_json<C: DeserializeOwned>(&self) -> Result<Option<C>> {
        match self.cursor() {
            None => Ok(None),
            Some(bytes) => decode("cursor", &self.shared.task.task_type, Some(bytes)).map(Some),
        }
    }

    /// The parents this task waited for (read their results with [`Client::wait`]).
    pub fn parents(&self) -> &[String] {
        &self.shared.task.depends_on
    }

    /// The token cancelled when the handler should stop: the task was cancelled (here, or in
    /// another process, seen at the next heartbeat), its lease was lost, or shutdown ran out
    /// of time.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.shared.exec.cancel.clone()
    }

    /// True once the handler should stop.
    pub fn is_cancelled(&self) -> bool {
        self.shared.exec.cancel.is_cancelled()
    }

    /// Completes when the handler should stop.
    pub async fn cancelled(&self) {
        self.shared.exec.cancel.cancelled().await;
    }

    /// A client on the same broker and config (submit follow-ups, read parents).
    pub fn client(&self) -> Client {
        Client::from_inner(self.shared.inner.clone())
    }

    /// Renews the lease now (the heartbeat of `manual_heartbeat` queues; harmless otherwise).
    ///
    /// A cancel request cancels the token and returns the broker's `Canceled`; a lost lease
    /// (the reaper gave the task to someone else) cancels the token and returns `LeaseLost`:
    /// stop, this run's result will not be written.
    pub async fn renew_lease(&self) -> Result<()> {
        let (task, exec) = (&self.shared.task, &self.shared.exec);
        if exec.has(RELEASED) {
            return Err(Error::NotHeld(task.id.clone()));
        }
        if exec.has(LEASE_LOST) {
            return Err(taskgate::Error::lease_lost(&task.id).into());
        }
        let renewed = self.shared.inner.broker.heartbeat(&task.id, &task.lease_token).await;
        match renewed {
            Ok(()) => Ok(()),
            Err(e) => Err(heartbeat_failed(exec, &task.id, e).into()),
        }
    }

    /// Saves a checkpoint and releases the task: it runs again after `step.delay` with this
    /// cursor (§E3). The handler should return right after; nothing else is written for this
    /// run. A cancel request makes the broker cancel the task (the checkpoint is kept) and
    /// this returns `Canceled`.
    pub async fn save_step(&self, step: Step) -> Result<()> {
        let (task, exec) = (&self.shared.task, &self.shared.exec);
        if !exec.holds_lease() {
            return Err(Error::NotHeld(task.id.clone()));
        }
        exec.mark(RELEASED, false);
        let saved = self.shared.inner.broker.save_step(&task.id, &task.lease_token, step).await;
        match saved {
            Ok(()) => {
                self.shared.inner.finished();
                Ok(())
            }
            Err(e) if e.is(ErrorKind::Canceled) => {
                exec.mark(USER_CANCELLED, true);
                self.shared.inner.finished();
                Err(e.into())
            }
            Err(e) if e.is(ErrorKind::LeaseLost) || e.is(ErrorKind::NotFound) => {
                exec.mark(LEASE_LOST, true);
                Err(taskgate::Error::lease_lost(&task.id).into())
            }
            Err(e) => {
                exec.unmark(RELEASED);
                Err(e.into())
            }
        }
    }

    pub(crate) fn exec(&self) -> &Arc<Exec> {
        &self.shared.exec
    }
}

impl std::fmt::Debug for JobContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JobContext")
            .field("id", &self.shared.task.id)
            .field("kind", &self.shared.task.task_type)
            .field("cancelled", &self.is_cancelled())
            .finish()
    }
}

/// Applies a failed heartbeat's meaning to `exec` (runtime spec §12.4 step 3) and returns the
/// error the caller reports: `Canceled` as is, `NotFound` as `LeaseLost`.
pub(crate) fn heartbeat_failed(exec: &Exec, id: &str, e: taskgate::Error) -> taskgate::Error {
    match e.kind() {
        ErrorKind::Canceled => {
            if !exec.has(USER_CANCELLED) {
                tracing::info!(task = id, "cancel requested");
            }
            exec.mark(USER_CANCELLED, true);
            e
        }
        ErrorKind::LeaseLost | ErrorKind::NotFound => {
            if !exec.has(LEASE_LOST) {
                tracing::warn!(task = id, "lease lost");
            }
            exec.mark(LEASE_LOST, true);
            taskgate::Error::lease_lost(id)
        }
        _ => e,
    }
}
