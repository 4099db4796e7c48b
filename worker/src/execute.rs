//! Executing one claimed task (runtime spec §12.4): find the handler, run it with automatic
//! heartbeats, then the final write (`finish.rs`). [`Execs`] is where executions start: the
//! runtime's tracker of them and the registered handlers.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate::{BoxFuture, ErrorKind, Task, Ticker};
use tokio::sync::OwnedSemaphorePermit;
use tokio_util::task::TaskTracker;
use tracing::Instrument;

use crate::context::heartbeat_failed;
use crate::error::chain_text;
use crate::finish::{finish, no_handler, Outcome};
use crate::handler::{CatchUnwind, Handler};
use crate::inner::Inner;
use crate::queue::QueueRt;
use crate::{JobContext, JobError};

/// Where executions start: the tracker shutdown waits on, and the handlers by task type.
#[derive(Clone)]
pub(crate) struct Execs {
    /// Every execution (and every worker of held tasks) runs on it.
    pub(crate) tracker: TaskTracker,
    handlers: Arc<HashMap<String, Handler>>,
}

impl Execs {
    pub(crate) fn new(handlers: HashMap<String, Handler>) -> Execs {
        Execs { tracker: TaskTracker::new(), handlers: Arc::new(handlers) }
    }

    /// Spawns `run` on the tracker; dropped where it stands if the runtime is dropped (a
    /// crash).
    pub(crate) fn spawn(&self, inner: &Inner, run: impl Future<Output = ()> + Send + 'static) {
        self.tracker.spawn(inner.stops.kill.clone().run_until_cancelled_owned(run));
    }

    /// Starts one execution of `task`; `slot` is freed when it ends.
    pub(crate) fn start(
        &self,
        inner: &Arc<Inner>,
        q: &Arc<QueueRt>,
        task: Task,
        slot: Option<OwnedSemaphorePermit>,
    ) {
        self.spawn(inner, self.execute(inner.clone(), q.clone(), task, slot));
    }

    /// Runs one claimed task to its final write; the slot is freed when this returns.
    pub(crate) fn execute(
        &self,
        inner: Arc<Inner>,
        q: Arc<QueueRt>,
        task: Task,
        slot: Option<OwnedSemaphorePermit>,
    ) -> impl Future<Output = ()> + Send + 'static {
        let handler = self.handlers.get(&task.task_type).cloned();
        execute(inner, q, handler, task, slot)
    }
}

/// Runs one claimed task with `handler` (none registered: a dead letter) to its final write;
/// the slot is freed when this returns.
async fn execute(
    inner: Arc<Inner>,
    q: Arc<QueueRt>,
    handler: Option<Handler>,
    task: Task,
    slot: Option<OwnedSemaphorePermit>,
) {
    let span = tracing::info_span!("taskgate.task", kind = %task.task_type, queue = %task.queue,
        id = %task.id, attempt = task.attempts);
    run(inner, q, handler, task).instrument(span).await;
    drop(slot);
}

async fn run(inner: Arc<Inner>, q: Arc<QueueRt>, handler: Option<Handler>, task: Task) {
    q.metrics.claimed.increment(1);
    let latency = inner.clock.now_ms().duration_since(task.run_at);
    q.metrics.queue_latency.record(latency.as_secs_f64());
    tracing::debug!(latency_ms = latency.as_millis(), "claimed");
    let Some(handler) = handler else {
        return no_handler(&inner, &q, &task).await;
    };
    let exec = inner.running.register(&task.id);
    q.active.fetch_add(1, Ordering::SeqCst);
    let ctx = JobContext::new(task, exec.clone(), inner.clone());
    let started = Instant::now();
    let outcome = supervise(&inner, &q, &ctx, handler).await;
    q.metrics.run_time.record(started.elapsed().as_secs_f64());
    finish(&inner, &q, ctx.exec(), ctx.task(), outcome).await;
    inner.running.remove(ctx.id(), &exec);
    q.active.fetch_sub(1, Ordering::SeqCst);
}

/// Runs the handler; heartbeats every TTL/3 on the clock unless heartbeats are manual. The
/// in-flight heartbeat is awaited before returning, so none lands after the final write.
/// `None` means the handler was abandoned (still running after shutdown's stop timeout).
async fn supervise(
    inner: &Inner,
    q: &QueueRt,
    ctx: &JobContext,
    handler: Handler,
) -> Option<Result<Outcome, JobError>> {
    let exec = ctx.exec();
    let mut handler = CatchUnwind(handler(ctx.clone()));
    let period = (q.settings.lease_ttl / 3).max(Duration::from_millis(1));
    let mut ticker = (!q.settings.manual_heartbeat).then(|| inner.clock.ticker(period));
    let mut beat: Option<BoxFuture<'static, taskgate::Result<()>>> = None;
    let outcome = loop {
        tokio::select! {
            // A handler that returned wins over everything else, so its result is written
            // even when it returns after the stop timeout (it blocked its thread).
            biased;
            out = &mut handler => break Some(out),
            // Fired only after every execution was interrupted and given the stop timeout.
            () = inner.stops.abandon.cancelled() => break None,
            () = tick(&mut ticker), if beat.is_none() && exec.holds_lease() => {
                let (broker, task) = (inner.broker.clone(), ctx.task());
                let (id, token) = (task.id.clone(), task.lease_token.clone());
                beat = Some(Box::pin(async move { broker.heartbeat(&id, &token).await }));
            }
            r = in_flight(&mut beat) => {
                beat = None;
                heartbeat_done(ctx, r);
            }
        }
    };
    drop(ticker);
    if let Some(b) = beat.take() {
        heartbeat_done(ctx, b.await);
    }
    outcome
}

async fn tick(ticker: &mut Option<Ticker>) {
    match ticker {
        Some(t) => t.tick().await,
        None => std::future::pending().await,
    }
}

async fn in_flight(beat: &mut Option<BoxFuture<'static, taskgate::Result<()>>>) -> taskgate::Result<()> {
    match beat {
        Some(b) => b.await,
        None => std::future::pending().await,
    }
}

fn heartbeat_done(ctx: &JobContext, result: taskgate::Result<()>) {
    if let Err(e) = result {
        let e = heartbeat_failed(ctx.exec(), ctx.id(), e);
        if !e.is(ErrorKind::Canceled) && !e.is(ErrorKind::LeaseLost) {
            tracing::warn!(error = %chain_text(&e), "heartbeat failed (tolerated)");
        }
    }
}
