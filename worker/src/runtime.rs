//! Building, running and stopping a runtime (runtime spec §12.1, §12.3, §12.5): validation and
//! broker init at start, one claim loop per consumed queue, one reaper, the completer and the
//! periodic scheduler; graceful shutdown, and drop as a crash.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use taskgate::backoff::Backoff;
use taskgate::notify::NotifyFn;
use taskgate::{Broker, BrokerOptions, Clock, QuotaGate, QuotaProvider, SystemClock, Task, Ticker};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::ahead;
use crate::claim::{claim_loop, QueueRt};
use crate::completer::{self, Completer};
use crate::config::{QueueSettings, Resolved};
use crate::error::chain_text;
use crate::handler::{self, Handler, Stepped};
use crate::inner::{killable, Inner, RetryDelay};
#[cfg(feature = "cron")]
use crate::Periodic;
use crate::{Client, Config, Error, Job, JobContext, JobError, Result, ShutdownReport};

/// How long handlers get to return after shutdown cancelled them before they are dropped.
pub const DEFAULT_STOP_TIMEOUT: Duration = Duration::from_secs(5);

/// The periodic schedules a runtime submits, each with its queue.
#[cfg(feature = "cron")]
type Schedules = Vec<(Periodic, String)>;
/// Without the `cron` feature a runtime has no schedules.
#[cfg(not(feature = "cron"))]
type Schedules = Vec<std::convert::Infallible>;

/// Configures and starts a [`Runtime`].
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use serde::{Deserialize, Serialize};
/// use taskgate_worker::{Config, Job, JobError, QueueConfig, Runtime};
///
/// #[derive(Serialize, Deserialize)]
/// struct SendEmail { to: String }
/// impl Job for SendEmail {
///     const KIND: &'static str = "send_email";
///     type Output = ();
/// }
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let runtime = Runtime::builder(Arc::new(taskgate_memory::MemoryBroker::new()))
///     .config(Config::new().queue("send_email", QueueConfig::workers(4)))
///     .register(|job: SendEmail, _ctx| async move {
///         if job.to.is_empty() {
///             return Err(JobError::skip(JobError::msg("no address")));
///         }
///         Ok(())
///     })
///     .start()
///     .await?;
/// let id = runtime.client().submit(SendEmail { to: "a@example.com".into() }).await?;
/// runtime.client().wait(&id).await?;
/// runtime.shutdown(Duration::from_secs(30)).await?;
/// # Ok::<(), taskgate_worker::Error>(()) }).unwrap();
/// ```
#[must_use = "a builder does nothing until `start`"]
pub struct Builder {
    broker: Arc<dyn Broker>,
    config: Config,
    clock: Option<Arc<dyn Clock>>,
    local_clock: Option<Arc<dyn Clock>>,
    handlers: Vec<(String, Option<&'static str>, Handler)>,
    #[cfg(feature = "cron")]
    periodic: Vec<Periodic>,
    on_state_change: Option<NotifyFn>,
    quota_provider: Option<Arc<dyn QuotaProvider>>,
    retry_delay: Option<RetryDelay>,
    stop_timeout: Duration,
    max_payload_bytes: usize,
}

impl Builder {
    /// The configuration (default: [`Config::default`]).
    pub fn config(mut self, config: Config) -> Self {
        self.config = config;
        self
    }

    /// Injects a clock: the broker, heartbeats, the reaper, delays and periodic ticks use it
    /// (tests pass a `ManualClock`). Default: the system clock, and the server's for
    /// PostgreSQL and MySQL.
    pub fn clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// The runtime's own clock, when it is not the broker's: heartbeats, the reaper's rounds
    /// and every wait of the runtime run on it, and the broker gets it as its
    /// [`local_clock`](taskgate::BrokerOptions::local_clock), which never overrides a
    /// database server's time or an injected [`Builder::clock`]. Default: the injected clock,
    /// else the system clock. What is due — leases, delays, periodic ticks — is judged by the
    /// broker's clock ([`Broker::now`]), so tests use this to run a runtime whose machine
    /// clock is off from the broker's.
    pub fn local_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.local_clock = Some(clock);
        self
    }

    /// Handles job `J` with `handler(job, ctx) -> Result<J::Output, JobError>`.
    pub fn register<J, F, Fut>(mut self, handler: F) -> Self
    where
        J: Job,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<J::Output, JobError>> + Send + 'static,
    {
        self.handlers.push((J::KIND.to_owned(), J::QUEUE, handler::typed::<J, _, _>(handler)));
        self
    }

    /// Handles stepwise job `J`: each run returns [`Stepped::Step`] (the checkpoint is saved
    /// and the job runs again after `step.delay` with that cursor, §E3) or
    /// [`Stepped::Done`] with the output.
    pub fn register_steps<J, F, Fut>(mut self, handler: F) -> Self
    where
        J: Job,
        F: Fn(J, JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Stepped<J::Output>, JobError>> + Send + 'static,
    {
        self.handlers.push((J::KIND.to_owned(), J::QUEUE, handler::stepwise::<J, _, _>(handler)));
        self
    }

    /// Handles task type `kind` with raw bytes: the payload is `ctx.payload()`, the returned
    /// bytes become the result.
    pub fn register_raw<F, Fut>(mut self, kind: impl Into<String>, handler: F) -> Self
    where
        F: Fn(JobContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Option<Vec<u8>>, JobError>> + Send + 'static,
    {
        self.handlers.push((kind.into(), None, handler::raw(handler)));
        self
    }

    /// Adds a periodic job (the `cron` cargo feature).
    #[cfg(feature = "cron")]
    pub fn periodic(mut self, periodic: Periodic) -> Self {
        self.periodic.push(periodic);
        self
    }

    /// Observes every status change (contract §3.5: asynchronous, panics contained, for
    /// metrics and logs, never for side effects).
    pub fn on_state_change(mut self, observer: impl Fn(&Task) + Send + Sync + 'static) -> Self {
        self.on_state_change = Some(Arc::new(observer));
        self
    }

    /// Uses this quota provider instead of the broker's own.
    pub fn quota_provider(mut self, provider: Arc<dyn QuotaProvider>) -> Self {
        self.quota_provider = Some(provider);
        self
    }

    /// Business-retry delay for the claim-time attempts `n` (default: `taskgate::backoff`,
    /// `min(2^n s, 10 min) ± 20 %`).
    pub fn retry_delay(mut self, delay: impl Fn(u32) -> Duration + Send + Sync + 'static) -> Self {
        self.retry_delay = Some(Arc::new(delay));
        self
    }

    /// How long handlers get to return after shutdown's grace ran out and cancelled them;
    /// then their futures are dropped and their tasks requeued (default 5 s). A handler that
    /// blocks its thread (`std::thread::sleep`, blocking I/O without `spawn_blocking`) can be
    /// neither cancelled nor dropped: shutdown waits until it returns.
    pub fn stop_timeout(mut self, timeout: Duration) -> Self {
        self.stop_timeout = timeout;
        self
    }

    /// Largest payload, result or cursor (default 16 MiB).
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// Validates everything, initialises the broker and starts the workers, the reaper, the
    /// completer and the periodic scheduler. With no handlers and no periodic jobs it is a
    /// producer: a client and nothing running.
    pub async fn start(self) -> Result<Runtime> {
        let config = Resolved::new(&self.config)?;
        let consumed = self.consumed_queues(&config)?;
        let schedules = self.schedules(&config)?;
        self.check_quota_provider(&config)?;
        self.broker.init(self.broker_options(&config)).await?;
        let gates = self.quota_gates(&consumed)?;
        let local = self.local_clock.clone().or_else(|| self.clock.clone());
        let clock = local.unwrap_or_else(|| Arc::new(SystemClock));
        // Ticks count from the broker's clock at start (periodic ticks are due by it).
        let start = match schedules.is_empty() {
            true => None,
            false => Some(self.broker.now().await?),
        };
        let queues: HashMap<String, Arc<QueueRt>> = consumed
            .into_iter()
            .map(|(name, settings)| {
                let gate = gates.get(&name).cloned();
                (name.clone(), Arc::new(QueueRt::new(name, settings, gate)))
            })
            .collect();
        let completer_cfg = config.completer.clone();
        let (completer, rx) = match completer_cfg.inline {
            true => (Completer::Inline, None),
            false => {
                let (tx, rx) = completer::channel(completer_cfg.max_batch);
                (Completer::Batched(tx), Some(rx))
            }
        };
        let retry_delay = self.retry_delay.unwrap_or_else(|| {
            let backoff = Backoff::from_entropy();
            Arc::new(move |n| backoff.next(i64::from(n)))
        });
        let inner = Arc::new(Inner {
            broker: self.broker,
            clock,
            config,
            handlers: self.handlers.into_iter().map(|(k, _, h)| (k, h)).collect(),
            queues,
            running: Default::default(),
            shutting_down: CancellationToken::new(),
            kill: CancellationToken::new(),
            abandon: CancellationToken::new(),
            completer,
            retry_delay,
            finished_tx: watch::Sender::new(0),
            tally: Default::default(),
        });
        let runtime = Runtime {
            inner: inner.clone(),
            loops: TaskTracker::new(),
            execs: TaskTracker::new(),
            completer_task: TaskTracker::new(),
            completer_stop: CancellationToken::new(),
            stop_timeout: self.stop_timeout,
            shut_down: AtomicBool::new(false),
        };
        runtime.spawn_all(rx, completer_cfg.max_batch, completer_cfg.max_wait, schedules, start);
        Ok(runtime)
    }

    /// The queues of registered handlers, deduplicated, with their settings.
    fn consumed_queues(&self, config: &Resolved) -> Result<BTreeMap<String, QueueSettings>> {
        let mut kinds = std::collections::HashSet::new();
        let mut queues = BTreeMap::new();
        for (kind, job_queue, _) in &self.handlers {
            if kind.is_empty() || !kinds.insert(kind.as_str()) {
                return Err(Error::config(format!("handlers.{kind}"), "empty or registered twice"));
            }
            let queue = config.queue_for(kind, *job_queue)?;
            let settings = config.settings(&queue)?.clone();
            queues.insert(queue, settings);
        }
        Ok(queues)
    }

    /// Without the `cron` feature there are no schedules.
    #[cfg(not(feature = "cron"))]
    fn schedules(&self, _config: &Resolved) -> Result<Schedules> {
        Ok(Vec::new())
    }

    #[cfg(feature = "cron")]
    fn schedules(&self, config: &Resolved) -> Result<Schedules> {
        let mut names = std::collections::HashSet::new();
        let mut out = Vec::new();
        for p in &self.periodic {
            if !names.insert(p.name()) {
                return Err(Error::config(format!("periodic.{}", p.name()), "registered twice"));
            }
            out.push((p.clone(), config.queue_for(p.kind, p.job_queue)?));
        }
        Ok(out)
    }

    fn provider(&self) -> Option<&dyn QuotaProvider> {
        match &self.quota_provider {
            Some(p) => Some(&**p),
            None => self.broker.quota_provider(),
        }
    }

    /// A quota without a provider is an error: quota never degrades silently (contract §9.2).
    fn check_quota_provider(&self, config: &Resolved) -> Result<()> {
        if self.provider().is_some() {
            return Ok(());
        }
        let configured = config.queues.iter().map(|(n, q)| (n.as_str(), q));
        let mut all = configured.chain(config.default_queue.iter().map(|q| ("default_queue", q)));
        match all.find_map(|(name, q)| q.quota.as_ref().map(|quota| (name, quota.limit))) {
            None => Ok(()),
            Some((name, limit)) => Err(Error::config(
                format!("{name}.quota_limit"),
                format!(
                    "queue {name} has quota_limit {limit} but the {} broker has no QuotaProvider",
                    self.broker.backend()
                ),
            )),
        }
    }

    /// A quota gate per consumed quota queue.
    fn quota_gates(
        &self,
        consumed: &BTreeMap<String, QueueSettings>,
    ) -> Result<HashMap<String, Arc<dyn QuotaGate>>> {
        let mut gates = HashMap::new();
        for (name, settings) in consumed {
            if let (Some(quota), Some(provider)) = (&settings.quota, self.provider()) {
                let gate = provider
                    .queue_quota(name, quota)
                    .map_err(|e| Error::config(format!("queues.{name}.quota"), e.to_string()))?;
                gates.insert(name.clone(), gate);
            }
        }
        Ok(gates)
    }

    fn broker_options(&self, config: &Resolved) -> BrokerOptions {
        let (lease_ttl, default_lease_ttl) = config.lease_ttls();
        BrokerOptions {
            lease_ttl,
            default_lease_ttl,
            lease_lost_max: config.lease_lost_max,
            throttled_max: config.throttled_max,
            notify: self.on_state_change.clone(),
            clock: self.clock.clone(),
            local_clock: self.local_clock.clone(),
            max_payload_bytes: self.max_payload_bytes,
        }
    }
}

/// A started runtime: workers claiming and running jobs, a reaper, the completer and the
/// periodic scheduler. Stop it with [`Runtime::shutdown`]; dropping it without shutdown is a
/// crash (every task stops where it is; unwritten acks are lost and their tasks run again
/// after their leases expire).
pub struct Runtime {
    inner: Arc<Inner>,
    loops: TaskTracker,
    execs: TaskTracker,
    completer_task: TaskTracker,
    completer_stop: CancellationToken,
    stop_timeout: Duration,
    shut_down: AtomicBool,
}

impl Runtime {
    /// A builder on `broker` (constructed; the runtime initialises it).
    pub fn builder(broker: Arc<dyn Broker>) -> Builder {
        Builder {
            broker,
            config: Config::default(),
            clock: None,
            local_clock: None,
            handlers: Vec::new(),
            #[cfg(feature = "cron")]
            periodic: Vec::new(),
            on_state_change: None,
            quota_provider: None,
            retry_delay: None,
            stop_timeout: DEFAULT_STOP_TIMEOUT,
            max_payload_bytes: 0,
        }
    }

    /// A client on this runtime.
    pub fn client(&self) -> Client {
        Client::from_inner(self.inner.clone())
    }

    fn spawn_all(
        &self,
        rx: Option<tokio::sync::mpsc::Receiver<completer::Done>>,
        max_batch: usize,
        max_wait: Duration,
        schedules: Schedules,
        start: Option<taskgate::Timestamp>,
    ) {
        let inner = &self.inner;
        let spawn = |tracker: &TaskTracker, fut| spawn_killable(tracker, &inner.kill, fut);
        if let Some(rx) = rx {
            let stop = self.completer_stop.clone();
            spawn(
                &self.completer_task,
                Box::pin(completer::run(inner.clone(), rx, max_batch, max_wait, stop)),
            );
        }
        for q in inner.queues.values() {
            let execs = self.execs.clone();
            if q.gated() {
                spawn(&self.loops, Box::pin(claim_loop(inner.clone(), q.clone(), execs)));
                continue;
            }
            for n in 0..ahead::FEEDERS {
                let feed = ahead::feed_loop(inner.clone(), q.clone(), execs.clone(), n);
                spawn(&self.loops, Box::pin(feed));
            }
            spawn(&self.loops, Box::pin(ahead::keeper(inner.clone(), q.clone(), execs)));
        }
        let min_ttl = inner.queues.values().map(|q| q.settings.lease_ttl).min();
        if let Some(ttl) = min_ttl {
            let period = (ttl / 2).max(Duration::from_millis(1));
            // The ticker starts now, not when the task first runs: time moved in between counts.
            let ticker = inner.clock.ticker(period);
            spawn(&self.loops, Box::pin(reaper(inner.clone(), ticker)));
        }
        #[cfg(feature = "cron")]
        if let Some(start) = start.filter(|_| !schedules.is_empty()) {
            spawn(&self.loops, Box::pin(crate::periodic::run(inner.clone(), schedules, start)));
        }
        #[cfg(not(feature = "cron"))]
        let _ = (schedules, start);
    }

    /// Stops gracefully (runtime spec §12.5): no more claims, submits or reaps; tasks claimed
    /// ahead that no handler started are requeued with no counter changed; running
    /// handlers get `grace` to finish (their results are written); then the rest are
    /// cancelled: one that still returns success is acked, the others are requeued with no
    /// counter changed, and those still running after the
    /// [stop timeout](Builder::stop_timeout) are dropped and requeued; acks are flushed.
    ///
    /// Running out of grace is an ordinary outcome, not an error: the [`ShutdownReport`]
    /// counts what happened to each execution (finished, finished after the grace, requeued,
    /// lease lost, final write failed). A handler that blocks its thread cannot be cancelled
    /// or dropped, so shutdown waits for it (it holds one of the tokio runtime's threads):
    /// run blocking work in `tokio::task::spawn_blocking` and await it. A second call returns
    /// an empty report at once. The broker stays open (it is yours).
    pub async fn shutdown(&self, grace: Duration) -> Result<ShutdownReport> {
        if self.shut_down.swap(true, Ordering::SeqCst) {
            return Ok(ShutdownReport::default());
        }
        self.inner.shutting_down.cancel();
        self.loops.close();
        self.loops.wait().await;
        for q in self.inner.queues.values() {
            ahead::requeue_held(&self.inner, q).await;
        }
        self.execs.close();
        let graceful = tokio::time::timeout(grace, self.execs.wait()).await.is_ok();
        if !graceful {
            let running = self.inner.running.interrupt_all();
            tracing::warn!(running, "shutdown grace elapsed; cancelling running handlers");
            if tokio::time::timeout(self.stop_timeout, self.execs.wait()).await.is_err() {
                tracing::warn!(
                    "handlers ignored cancellation; dropping them (one that blocks its thread \
                     cannot be dropped: shutdown waits until it returns)"
                );
                self.inner.abandon.cancel();
                self.execs.wait().await;
            }
        }
        self.completer_stop.cancel();
        self.completer_task.close();
        self.completer_task.wait().await;
        let report = self.inner.tally.report(!graceful);
        tracing::info!(%report, "shut down");
        Ok(report)
    }

    /// Runs until SIGINT or SIGTERM (Ctrl-C), then shuts down with `grace` and returns what
    /// shutdown did (see [`Runtime::shutdown`]).
    pub async fn run_until_signal(self, grace: Duration) -> Result<ShutdownReport> {
        shutdown_signal().await;
        tracing::info!("signal received; shutting down");
        self.shutdown(grace).await
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !self.shut_down.load(Ordering::SeqCst) {
            self.inner.shutting_down.cancel();
            self.inner.kill.cancel();
        }
    }
}

impl std::fmt::Debug for Runtime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut queues: Vec<&String> = self.inner.queues.keys().collect();
        queues.sort();
        f.debug_struct("Runtime")
            .field("backend", &self.inner.broker.backend())
            .field("queues", &queues)
            .field("running", &self.inner.running.len())
            .finish()
    }
}

type Background = std::pin::Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

fn spawn_killable(tracker: &TaskTracker, kill: &CancellationToken, fut: Background) {
    tracker.spawn(killable(kill.clone(), fut));
}

/// The process's reaper: `reap_expired` at every tick of the clock until shutdown; errors
/// are logged and the next round tries again.
async fn reaper(inner: Arc<Inner>, mut ticker: Ticker) {
    loop {
        tokio::select! {
            () = ticker.tick() => {}
            () = inner.shutting_down.cancelled() => return,
        }
        match inner.broker.reap_expired().await {
            Ok(0) => {}
            Ok(n) => {
                // A lease that expired is a worker that stopped heart-beating (crashed,
                // killed, cut off or blocking its thread): worth a look.
                tracing::warn!(reaped = n, "reaped tasks whose lease expired; they run again");
                inner.finished();
            }
            Err(e) => tracing::warn!(error = %chain_text(&e), "reap failed"),
        }
    }
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM: await it, then shut the runtime down.
///
/// ```no_run
/// # async fn demo(runtime: taskgate_worker::Runtime) -> taskgate_worker::Result<()> {
/// taskgate_worker::shutdown_signal().await;
/// let report = runtime.shutdown(std::time::Duration::from_secs(30)).await?;
/// println!("{report}");
/// # Ok(()) }
/// ```
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = term => {}
    }
}
