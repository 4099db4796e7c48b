//! The injected clock: every time a broker reads or waits on goes through [`Clock`], so tests
//! control time with [`ManualClock`] and never sleep.

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::{oneshot, Notify};

use crate::Timestamp;

/// A boxed, sendable future (the shape [`Clock`] hands out so it stays object-safe).
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The source of "now" and of timed waits.
///
/// Contract §3.2: `now`, a one-shot wait (`sleep`, cancelled by dropping it) and a periodic
/// [`Ticker`]. The system implementation is [`SystemClock`]; tests use [`ManualClock`].
pub trait Clock: Send + Sync + fmt::Debug {
    /// The current instant.
    fn now(&self) -> SystemTime;

    /// A future that completes once `d` has elapsed on this clock; `d == 0` completes at once.
    /// Dropping it cancels the wait.
    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()>;

    /// Periodic ticks every `period` (which must be non-zero). At most one undelivered tick is
    /// buffered; extra ticks are dropped, like a real ticker.
    fn ticker(&self, period: Duration) -> Ticker;

    /// `now()` floored to whole milliseconds.
    fn now_ms(&self) -> Timestamp {
        Timestamp::from_system_time(self.now())
    }
}

/// The real clock: the system's wall clock and tokio's timers.
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> SystemTime {
        SystemTime::now()
    }

    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        Box::pin(tokio::time::sleep(d))
    }

    fn ticker(&self, period: Duration) -> Ticker {
        let period = period.max(Duration::from_millis(1));
        let mut interval = tokio::time::interval_at(tokio::time::Instant::now() + period, period);
        interval.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
        Ticker { source: TickSource::System(Box::new(interval)) }
    }
}

/// Periodic ticks from a [`Clock`]. Dropping it (or [`Ticker::stop`]) silences it.
pub struct Ticker {
    source: TickSource,
}

enum TickSource {
    System(Box<tokio::time::Interval>),
    Manual(ManualTicker),
    Stopped,
}

impl Ticker {
    /// Waits for the next tick. A stopped ticker never ticks again.
    pub async fn tick(&mut self) {
        match &mut self.source {
            TickSource::System(interval) => {
                interval.tick().await;
            }
            TickSource::Manual(t) => t.tick().await,
            TickSource::Stopped => futures::future::pending::<()>().await,
        }
    }

    /// Stops the ticker; later [`Ticker::tick`] calls wait forever.
    pub fn stop(&mut self) {
        self.source = TickSource::Stopped;
    }
}

impl fmt::Debug for Ticker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let kind = match self.source {
            TickSource::System(_) => "system",
            TickSource::Manual(_) => "manual",
            TickSource::Stopped => "stopped",
        };
        f.debug_struct("Ticker").field("source", &kind).finish()
    }
}

/// A clock that moves only when told to: the contract suite's fake clock (contract §10.1).
///
/// * `sleep(d)` completes when [`ManualClock::advance`] moves time to at least its deadline
///   (the boundary is inclusive; `d == 0` completes at once).
/// * A ticker delivers a tick for every period crossed during an advance, buffering at most one
///   undelivered tick.
/// * [`ManualClock::ticker_count`] and [`ManualClock::sleeper_count`] let a test wait until a
///   background loop is waiting on the clock before it advances.
///
/// Clones share the same time.
#[derive(Clone)]
pub struct ManualClock {
    shared: Arc<Mutex<ManualState>>,
}

struct ManualState {
    now: SystemTime,
    next_id: u64,
    sleepers: BTreeMap<(SystemTime, u64), oneshot::Sender<()>>,
    tickers: HashMap<u64, TickerState>,
}

struct TickerState {
    period: Duration,
    next: SystemTime,
    pending: bool,
    notify: Arc<Notify>,
}

/// 2026-01-01T00:00:00Z, where the contract suite's clock starts (contract §10.1).
pub const CONTRACT_EPOCH: Duration = Duration::from_secs(1_767_225_600);

impl ManualClock {
    /// A manual clock showing `start`.
    pub fn new(start: SystemTime) -> Self {
        let state = ManualState {
            now: start,
            next_id: 0,
            sleepers: BTreeMap::new(),
            tickers: HashMap::new(),
        };
        ManualClock { shared: Arc::new(Mutex::new(state)) }
    }

    /// A manual clock at 2026-01-01T00:00:00Z, the contract suite's starting point.
    pub fn at_contract_epoch() -> Self {
        ManualClock::new(UNIX_EPOCH + CONTRACT_EPOCH)
    }

    fn state(&self) -> MutexGuard<'_, ManualState> {
        lock(&self.shared)
    }

    /// Moves time forward by `d` and wakes every sleeper and ticker that became due.
    pub fn advance(&self, d: Duration) {
        let mut state = self.state();
        state.now += d;
        let now = state.now;
        let later = state.sleepers.split_off(&(now, u64::MAX));
        let due = std::mem::replace(&mut state.sleepers, later);
        let mut wake = Vec::new();
        for ticker in state.tickers.values_mut() {
            let mut crossed = false;
            while ticker.next <= now {
                crossed = true;
                ticker.next += ticker.period;
            }
            if crossed && !ticker.pending {
                ticker.pending = true;
                wake.push(ticker.notify.clone());
            }
        }
        drop(state);
        for (_, sender) in due {
            let _ = sender.send(());
        }
        for notify in wake {
            notify.notify_one();
        }
    }

    /// Number of live tickers (started and neither stopped nor dropped).
    pub fn ticker_count(&self) -> usize {
        self.state().tickers.len()
    }

    /// Number of pending sleeps (registered, not yet due, not dropped).
    pub fn sleeper_count(&self) -> usize {
        self.state().sleepers.len()
    }
}

fn lock(m: &Mutex<ManualState>) -> MutexGuard<'_, ManualState> {
    // A panic while holding this lock cannot leave the state half-updated in a way that matters
    // to callers (every update is a plain field write), so a poisoned lock is still usable.
    m.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock").field("now", &self.now_ms()).finish()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> SystemTime {
        self.state().now
    }

    fn sleep(&self, d: Duration) -> BoxFuture<'static, ()> {
        if d.is_zero() {
            return Box::pin(std::future::ready(()));
        }
        let (tx, rx) = oneshot::channel();
        let mut state = self.state();
        let key = (state.now + d, state.next_id);
        state.next_id += 1;
        state.sleepers.insert(key, tx);
        drop(state);
        Box::pin(ManualSleep { rx, key, shared: Arc::downgrade(&self.shared) })
    }

    fn ticker(&self, period: Duration) -> Ticker {
        assert!(!period.is_zero(), "ticker period must be non-zero");
        let notify = Arc::new(Notify::new());
        let mut state = self.state();
        let id = state.next_id;
        state.next_id += 1;
        let next = state.now + period;
        state
            .tickers
            .insert(id, TickerState { period, next, pending: false, notify: notify.clone() });
        drop(state);
        let ticker = ManualTicker { id, notify, shared: Arc::downgrade(&self.shared) };
        Ticker { source: TickSource::Manual(ticker) }
    }
}

struct ManualSleep {
    rx: oneshot::Receiver<()>,
    key: (SystemTime, u64),
    shared: Weak<Mutex<ManualState>>,
}

impl Future for ManualSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // A dropped sender means the clock itself is gone: time can never reach the deadline.
        match Pin::new(&mut self.rx).poll(cx) {
            Poll::Ready(Ok(())) => Poll::Ready(()),
            Poll::Ready(Err(_)) | Poll::Pending => Poll::Pending,
        }
    }
}

impl Drop for ManualSleep {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared).sleepers.remove(&self.key);
        }
    }
}

struct ManualTicker {
    id: u64,
    notify: Arc<Notify>,
    shared: Weak<Mutex<ManualState>>,
}

impl ManualTicker {
    async fn tick(&mut self) {
        loop {
            let Some(shared) = self.shared.upgrade() else {
                return futures::future::pending().await;
            };
            let taken = lock(&shared)
                .tickers
                .get_mut(&self.id)
                .map(|t| std::mem::replace(&mut t.pending, false))
                .unwrap_or(false);
            drop(shared);
            if taken {
                return;
            }
            self.notify.notified().await;
        }
    }
}

impl Drop for ManualTicker {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            lock(&shared).tickers.remove(&self.id);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::FutureExt;

    #[tokio::test]
    async fn sleep_fires_on_inclusive_boundary() {
        let clock = ManualClock::at_contract_epoch();
        let mut early = clock.sleep(Duration::from_secs(5));
        clock.advance(Duration::from_millis(4_999));
        assert!((&mut early).now_or_never().is_none());
        clock.advance(Duration::from_millis(1));
        assert!(early.now_or_never().is_some());
        assert!(clock.sleep(Duration::ZERO).now_or_never().is_some());
    }

    #[tokio::test]
    async fn dropped_sleep_unregisters() {
        let clock = ManualClock::at_contract_epoch();
        let s = clock.sleep(Duration::from_secs(1));
        assert_eq!(clock.sleeper_count(), 1);
        drop(s);
        assert_eq!(clock.sleeper_count(), 0);
    }

    #[tokio::test]
    async fn ticker_buffers_at_most_one_tick() {
        let clock = ManualClock::at_contract_epoch();
        let mut ticker = clock.ticker(Duration::from_secs(1));
        assert_eq!(clock.ticker_count(), 1);
        clock.advance(Duration::from_secs(3));
        assert!(ticker.tick().now_or_never().is_some());
        assert!(ticker.tick().now_or_never().is_none());
        clock.advance(Duration::from_secs(1));
        assert!(ticker.tick().now_or_never().is_some());
        ticker.stop();
        assert_eq!(clock.ticker_count(), 0);
        clock.advance(Duration::from_secs(1));
        assert!(ticker.tick().now_or_never().is_none());
    }

    #[test]
    fn contract_epoch_is_2026() {
        let clock = ManualClock::at_contract_epoch();
        assert_eq!(clock.now_ms().as_millis(), 1_767_225_600_000);
    }
}
