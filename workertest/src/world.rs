//! One scenario's world: fresh storage from a brokertest factory, a clock (real, or a manual
//! clock at 2026-01-01 for scenarios that move time), runtimes on their own broker handles,
//! and waits that fail with what they waited for instead of hanging.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brokertest::{Factory, Storage};
use taskgate::{BoxError, BoxFuture, Broker, Clock, ManualClock, Task, Ticker, Timestamp};
use taskgate_worker::{Builder, Client, Runtime};

/// The longest any single wait in a scenario may take before it fails (a hang detector, not
/// a timing assertion).
pub const DEADLINE: Duration = Duration::from_secs(30);

/// What scenarios return: `Ok` when they passed.
pub type TestResult<T = ()> = Result<T, BoxError>;

/// A scenario's storage, clock and broker handles.
pub struct World {
    /// The manual clock, when the scenario moves time itself.
    pub clock: Option<ManualClock>,
    storage: Box<dyn Storage>,
    handles: Mutex<Vec<Arc<dyn Broker>>>,
}

impl World {
    /// Fresh storage; runtimes use real time.
    pub async fn new(factory: &dyn Factory) -> TestResult<World> {
        World::build(factory, None).await
    }

    /// Fresh storage; runtimes and brokers use a manual clock at 2026-01-01T00:00:00Z.
    pub async fn manual(factory: &dyn Factory) -> TestResult<World> {
        World::build(factory, Some(ManualClock::at_contract_epoch())).await
    }

    async fn build(factory: &dyn Factory, clock: Option<ManualClock>) -> TestResult<World> {
        let storage = factory.storage().await?;
        Ok(World { clock, storage, handles: Mutex::new(Vec::new()) })
    }

    /// A new broker handle on the storage (another "process"), not initialised.
    pub async fn handle(&self) -> TestResult<Arc<dyn Broker>> {
        let handle = self.storage.handle().await?;
        self.handles.lock().unwrap_or_else(|p| p.into_inner()).push(handle.clone());
        Ok(handle)
    }

    /// A runtime builder on a new handle, on the world's clock.
    pub async fn builder(&self) -> TestResult<Builder> {
        let builder = Runtime::builder(self.handle().await?);
        Ok(match &self.clock {
            Some(clock) => builder.clock(Arc::new(clock.clone()) as Arc<dyn Clock>),
            None => builder,
        })
    }

    /// Starts a runtime on a new handle, configured by `tune`.
    pub async fn start(&self, tune: impl FnOnce(Builder) -> Builder) -> TestResult<Runtime> {
        Ok(tune(self.builder().await?).start().await?)
    }

    /// Starts a runtime whose own clock is `skew_ms` milliseconds ahead of the world's
    /// manual clock (behind when negative), as on a machine whose clock is off; its broker
    /// keeps the world's clock.
    pub async fn start_skewed(
        &self,
        skew_ms: i64,
        tune: impl FnOnce(Builder) -> Builder,
    ) -> TestResult<Runtime> {
        let local = SkewedClock { base: self.manual_clock().clone(), skew_ms };
        Ok(tune(self.builder().await?.local_clock(Arc::new(local))).start().await?)
    }

    /// Moves the manual clock.
    pub fn advance(&self, d: Duration) {
        self.manual_clock().advance(d);
    }

    /// The manual clock's time, floored to milliseconds.
    pub fn now(&self) -> Timestamp {
        self.manual_clock().now_ms()
    }

    fn manual_clock(&self) -> &ManualClock {
        self.clock.as_ref().expect("advance needs a manual-clock world")
    }

    /// Moves the manual clock once something waits on it (a claimer sleeping until a retry
    /// is due): a wait registered after the move would count from the new time.
    pub async fn advance_when_waiting(&self, d: Duration) -> TestResult {
        let clock = self.manual_clock();
        eventually("a sleeper on the clock", || async { Ok(clock.sleeper_count() > 0) }).await?;
        clock.advance(d);
        Ok(())
    }

    /// Closes every handle and removes the storage (after the runtimes were shut down).
    pub async fn finish(self) -> TestResult {
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|p| p.into_inner()));
        for handle in handles {
            handle.close().await?;
        }
        self.storage.cleanup().await
    }
}

/// A clock `skew_ms` milliseconds ahead of a manual clock (behind when negative): it reads
/// the manual clock's time plus the skew; sleeps and tickers are the manual clock's, so
/// durations agree and advancing the manual clock moves both.
#[derive(Clone, Debug)]
pub struct SkewedClock {
    base: ManualClock,
    skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now(&self) -> std::time::SystemTime {
        let base = self.base.now();
        let skew = Duration::from_millis(self.skew_ms.unsigned_abs());
        match self.skew_ms >= 0 {
            true => base.checked_add(skew).unwrap_or(base),
            false => base.checked_sub(skew).unwrap_or(std::time::UNIX_EPOCH),
        }
    }

    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        self.base.sleep(d)
    }

    fn ticker(&self, period: Duration) -> Ticker {
        self.base.ticker(period)
    }
}

/// Polls `check` every 10 ms (real time) until it returns true; fails naming `what` after
/// [`DEADLINE`].
pub async fn eventually<F, Fut>(what: &str, mut check: F) -> TestResult
where
    F: FnMut() -> Fut,
    Fut: Future<Output = TestResult<bool>>,
{
    let started = std::time::Instant::now();
    loop {
        if check().await? {
            return Ok(());
        }
        if started.elapsed() > DEADLINE {
            return Err(format!("timed out after {DEADLINE:?} waiting for {what}").into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Waits until task `id` satisfies `check`; returns it.
pub async fn task_until(
    client: &Client,
    id: &str,
    what: &str,
    check: impl Fn(&Task) -> bool,
) -> TestResult<Task> {
    let found = Arc::new(Mutex::new(None));
    eventually(&format!("task {id}: {what}"), || {
        let found = found.clone();
        let check = &check;
        async move {
            let task = client.get(id).await?;
            let ok = check(&task);
            *found.lock().unwrap_or_else(|p| p.into_inner()) = Some(task);
            Ok(ok)
        }
    })
    .await?;
    let task = found.lock().unwrap_or_else(|p| p.into_inner()).take();
    task.ok_or_else(|| "no task read".into())
}

/// `fut` within [`DEADLINE`], or an error naming `what`.
pub async fn within<T>(what: &str, fut: impl Future<Output = T>) -> TestResult<T> {
    tokio::time::timeout(DEADLINE, fut)
        .await
        .map_err(|_| format!("timed out after {DEADLINE:?}: {what}").into())
}
