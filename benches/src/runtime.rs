//! The worker runtime end to end (issue 16): a `taskgate_worker::Runtime` with no-op handlers
//! on a bed's broker — draining a pre-filled backlog, keeping up with steady producers, and
//! the pickup latency of an idle worker (insert → handler start).
//!
//! Every run starts the runtime the way a service does (`Runtime::builder(broker)…start()`),
//! counts handler starts, and ends with a graceful `shutdown`, which waits for the running
//! handlers and flushes the completer: the time of a drain therefore runs from `start` to the
//! moment every ack is written.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate::{Broker, Task};
use taskgate_worker::{CompleterConfig, Config, QueueConfig, Runtime};
use tokio::sync::{mpsc, Notify};

use crate::fill::TASK_TYPE;
use crate::produce::{self, Producers};
use crate::Result;

/// The queue the runtime benchmarks use.
pub const QUEUE: &str = "rt";
/// The backlog the drain scenario empties (the 20,000 pre-filled no-op jobs).
pub const BACKLOG: u64 = 20_000;
/// Grace given to running handlers when a run ends (no-op handlers need none of it).
const GRACE: Duration = Duration::from_secs(30);

/// How the runtime is configured for one run.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RtSpec {
    /// Workers of the one queue (handlers at once; also the most one claim takes).
    pub workers: usize,
    /// Acks go through the batching completer (`ack_many`); `false` = each handler acks its
    /// own task (inline).
    pub completer: bool,
}

impl RtSpec {
    /// The workers × completer matrix of the issue: 1 / 4 / 16 workers, completer on and off,
    /// and 256 workers with the completer (River's own benchmark runs 2,000). The queue has
    /// the default `prefetch`, so the runtime claims ahead of its workers as far as the no-op
    /// handlers' finish rate asks for: claims carry hundreds of tasks even with one worker.
    pub const MATRIX: [RtSpec; 7] = [
        RtSpec { workers: 1, completer: false },
        RtSpec { workers: 4, completer: false },
        RtSpec { workers: 16, completer: false },
        RtSpec { workers: 1, completer: true },
        RtSpec { workers: 4, completer: true },
        RtSpec { workers: 16, completer: true },
        RtSpec { workers: 256, completer: true },
    ];

    /// `w16 completer` / `w16 inline`.
    pub fn label(&self) -> String {
        format!("w{} {}", self.workers, if self.completer { "completer" } else { "inline" })
    }

    /// The runtime's config: one queue of `workers` that the no-op task type is routed to,
    /// the default completer (flush at 100 acks or 5 ms) or inline acks.
    pub fn config(&self) -> Config {
        let workers = u32::try_from(self.workers).unwrap_or(u32::MAX);
        let mut config =
            Config::new().queue(QUEUE, QueueConfig::workers(workers)).route(TASK_TYPE, QUEUE);
        config.completer =
            if self.completer { CompleterConfig::default() } else { CompleterConfig::inline() };
        config
    }
}

/// What one runtime run did.
#[derive(Clone, Copy, Debug, Default)]
pub struct RtOutcome {
    /// Handlers that ran (each a no-op; every one was acked by the end of the run).
    pub jobs: u64,
    /// From `start` to the end of the graceful shutdown (drain), or the producers' window
    /// (steady state).
    pub elapsed: Duration,
    /// Tasks the producers stored (steady state; 0 for a drain).
    pub produced: u64,
    /// The run reached its target (the backlog drained, or every produced task ran) before
    /// its deadline.
    pub finished: bool,
}

impl RtOutcome {
    /// Jobs per second.
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.jobs as f64 / secs
        } else {
            0.0
        }
    }
}

/// Counts handler starts and signals when `target` is reached.
struct Counter {
    ran: AtomicU64,
    target: AtomicU64,
    reached: Notify,
}

impl Counter {
    fn new(target: u64) -> Arc<Counter> {
        Arc::new(Counter {
            ran: AtomicU64::new(0),
            target: AtomicU64::new(target),
            reached: Notify::new(),
        })
    }

    fn hit(&self) {
        let n = self.ran.fetch_add(1, Ordering::Relaxed) + 1;
        if n == self.target.load(Ordering::Relaxed) {
            self.reached.notify_one();
        }
    }

    fn ran(&self) -> u64 {
        self.ran.load(Ordering::Relaxed)
    }
}

/// Starts a runtime on `broker` whose no-op handler counts on `counter`.
async fn start(broker: Arc<dyn Broker>, spec: RtSpec, counter: &Arc<Counter>) -> Result<Runtime> {
    let counter = counter.clone();
    let runtime = Runtime::builder(broker)
        .config(spec.config())
        .register_raw(TASK_TYPE, move |_ctx| {
            counter.hit();
            async { Ok(None) }
        })
        .start()
        .await?;
    Ok(runtime)
}

/// Drains `total` tasks already waiting in [`QUEUE`] with a runtime of `spec`; stops at
/// `limit` if the backlog is not empty by then (the rate is then over the shorter work).
pub async fn drain(
    broker: &Arc<dyn Broker>,
    spec: RtSpec,
    total: u64,
    limit: Duration,
) -> Result<RtOutcome> {
    drain_on(std::slice::from_ref(broker), spec, total, limit).await
}

/// [`drain`] with one runtime of `spec` per handle of `brokers`, all started together (as one
/// worker process per handle would be; issue 39's handles on different cluster nodes): the
/// time runs from the first start to the end of the last graceful shutdown.
pub async fn drain_on(
    brokers: &[Arc<dyn Broker>],
    spec: RtSpec,
    total: u64,
    limit: Duration,
) -> Result<RtOutcome> {
    let counter = Counter::new(total);
    let begin = Instant::now();
    let mut runtimes = Vec::with_capacity(brokers.len());
    for broker in brokers {
        match start(broker.clone(), spec, &counter).await {
            Ok(runtime) => runtimes.push(runtime),
            Err(e) => {
                for runtime in runtimes {
                    let _ = runtime.shutdown(GRACE).await;
                }
                return Err(e);
            }
        }
    }
    let finished = tokio::time::timeout(limit, counter.reached.notified()).await.is_ok();
    let shutdowns = futures::future::join_all(runtimes.iter().map(|r| r.shutdown(GRACE)));
    for result in shutdowns.await {
        result?;
    }
    Ok(RtOutcome { jobs: counter.ran(), elapsed: begin.elapsed(), produced: 0, finished })
}

/// Steady state: a runtime of `spec` runs while `scenario`'s producers enqueue into
/// [`QUEUE`], `calls_each` calls each or until `limit`. With `wait_for_all`, the run lasts
/// until every produced task ran (criterion: time per job); otherwise it is measured over the
/// producers' window (the report: jobs completed per second while producing).
pub async fn steady(
    broker: &Arc<dyn Broker>,
    spec: RtSpec,
    scenario: Producers,
    calls_each: u64,
    limit: Duration,
    wait_for_all: bool,
) -> Result<RtOutcome> {
    let counter = Counter::new(u64::MAX);
    let runtime = start(broker.clone(), spec, &counter).await?;
    let begin = Instant::now();
    let produced = produce::enqueue(broker, QUEUE, scenario, calls_each, limit).await;
    let produced = match produced {
        Ok(p) => p.jobs,
        Err(e) => {
            let _ = runtime.shutdown(GRACE).await;
            return Err(e);
        }
    };
    let mut outcome = RtOutcome { produced, ..RtOutcome::default() };
    if wait_for_all {
        counter.target.store(produced, Ordering::Relaxed);
        let left = limit.saturating_sub(begin.elapsed()).max(Duration::from_secs(10));
        if counter.ran() < produced {
            outcome.finished = tokio::time::timeout(left, counter.reached.notified()).await.is_ok();
        } else {
            outcome.finished = true;
        }
        outcome.jobs = counter.ran();
        outcome.elapsed = begin.elapsed();
    } else {
        outcome.jobs = counter.ran();
        outcome.elapsed = begin.elapsed();
        outcome.finished = outcome.jobs >= produced;
    }
    runtime.shutdown(GRACE).await?;
    Ok(outcome)
}

/// Longest wait for one pickup before the sample fails.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Pickup latency of an idle worker: a runtime with one worker on `worker` (waiting in its
/// claim), `producer` enqueues one task into [`QUEUE`] every `idle`; one sample is the time
/// from the start of the enqueue to the handler's start.
pub async fn pickups(
    producer: Arc<dyn Broker>,
    worker: Arc<dyn Broker>,
    samples: usize,
    idle: Duration,
) -> Result<Vec<Duration>> {
    let (tx, mut rx) = mpsc::unbounded_channel::<Instant>();
    let spec = RtSpec { workers: 1, completer: true };
    let runtime = Runtime::builder(worker)
        .config(spec.config())
        .register_raw(TASK_TYPE, move |_ctx| {
            let _ = tx.send(Instant::now());
            async { Ok(None) }
        })
        .start()
        .await?;
    let mut out = Vec::with_capacity(samples);
    let mut failure = None;
    for _ in 0..samples {
        tokio::time::sleep(idle).await;
        let begin = Instant::now();
        if let Err(e) = producer.enqueue(&Task::new(TASK_TYPE, QUEUE)).await {
            failure = Some(e.to_string());
            break;
        }
        match tokio::time::timeout(SAMPLE_TIMEOUT, rx.recv()).await {
            Ok(Some(at)) => out.push(at.saturating_duration_since(begin)),
            Ok(None) => {
                failure = Some("the runtime's handler went away".to_owned());
                break;
            }
            Err(_) => {
                failure = Some(format!("no handler start within {SAMPLE_TIMEOUT:?}"));
                break;
            }
        }
    }
    runtime.shutdown(GRACE).await?;
    match failure {
        Some(e) => Err(e.into()),
        None => Ok(out),
    }
}
