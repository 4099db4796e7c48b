//! The per-case harness (contract §10.1): fresh storage, a manual clock at 2026-01-01, the
//! suite's default options, and the helpers whose semantics the cases' expectations rely on.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use taskgate::{
    BoxError, Broker, BrokerOptions, Clock, FailKind, Failure, ManualClock, Status, Task, Timestamp,
};
use tokio::task::JoinHandle;

use crate::{within, Factory, Need, Storage, WAIT_LIMIT};

/// The real-time window in which a waiter must *not* return to count as "still blocked".
pub const REAL_WINDOW: Duration = Duration::from_millis(100);

/// The real-time limit on every wait for an expected result.
pub const SAFETY_TIMEOUT: Duration = Duration::from_secs(5);

/// A task with a readable ID (`""` lets the broker generate one); an empty queue defaults to
/// the type.
pub fn task(id: &str, task_type: &str, queue: &str) -> Task {
    let queue = if queue.is_empty() { task_type } else { queue };
    Task::new(task_type, queue).with_id(id)
}

/// One case's world: a broker on fresh storage and the manual clock it reads.
pub struct Harness {
    /// The broker under test, initialised with [`Harness::options`].
    pub broker: Arc<dyn Broker>,
    /// The clock every handle of this case reads; only [`Harness::advance`] moves it.
    pub clock: ManualClock,
    storage: Box<dyn Storage>,
    options: BrokerOptions,
    handles: Mutex<Vec<Arc<dyn Broker>>>,
    /// Every handle polls this seldom (see [`Storage::handle_polling_every`]).
    poll: Option<Duration>,
}

impl Harness {
    /// Fresh storage and a broker with the suite's options: lease TTL 60 s, caps 3/100, the
    /// manual clock.
    pub async fn new(factory: &dyn Factory) -> Result<Harness, BoxError> {
        Harness::with_options(factory, |_| {}).await
    }

    /// Like [`Harness::new`], with the options adjusted by `tune` first.
    pub async fn with_options(
        factory: &dyn Factory,
        tune: impl FnOnce(&mut BrokerOptions),
    ) -> Result<Harness, BoxError> {
        Harness::build(factory, tune, None).await
    }

    /// This harness, for a case that needs `need`: when the backend declares it does not have
    /// it, the storage is removed and the case ends as
    /// [`Outcome::Unsupported`](crate::Outcome::Unsupported); when it declares it but does
    /// not deliver it, the case fails.
    ///
    /// ```ignore
    /// let h = Harness::new(factory).await?.require(Need::Quota).await?;
    /// ```
    pub async fn require(self, need: Need) -> Result<Harness, BoxError> {
        if let Err(e) = need.check(&*self.broker) {
            self.finish().await?;
            return Err(e);
        }
        Ok(self)
    }

    /// Like [`Harness::new`], with every handle polling for other handles' writes only every
    /// `interval` of real time ([`Storage::handle_polling_every`]), so only a wake-up can get
    /// a waiting claimer its task sooner. A backend that shares storage across processes but
    /// offers no such handle fails the case.
    pub async fn polling_every(
        factory: &dyn Factory,
        interval: Duration,
    ) -> Result<Harness, BoxError> {
        Harness::build(factory, |_| {}, Some(interval)).await
    }

    async fn build(
        factory: &dyn Factory,
        tune: impl FnOnce(&mut BrokerOptions),
        poll: Option<Duration>,
    ) -> Result<Harness, BoxError> {
        let clock = ManualClock::at_contract_epoch();
        let mut options = BrokerOptions {
            default_lease_ttl: Duration::from_secs(60),
            lease_lost_max: 3,
            throttled_max: 100,
            clock: Some(Arc::new(clock.clone()) as Arc<dyn Clock>),
            ..BrokerOptions::default()
        };
        tune(&mut options);
        let name = factory.name();
        let storage = within(WAIT_LIMIT, format!("{name}: new storage"), factory.storage()).await?;
        let broker = match open_handle(&*storage, poll).await {
            Ok(broker) => broker,
            Err(e) => {
                within(WAIT_LIMIT, "the storage's cleanup", storage.cleanup()).await?;
                return Err(e);
            }
        };
        within(WAIT_LIMIT, format!("{name}: init"), broker.init(options.clone())).await?;
        let handles = Mutex::new(vec![broker.clone()]);
        Ok(Harness { broker, clock, storage, options, handles, poll })
    }

    /// The options every handle of this case is initialised with.
    pub fn options(&self) -> BrokerOptions {
        self.options.clone()
    }

    /// A second, initialised handle on the same storage (same options, same clock).
    pub async fn second_handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        let handle = self.raw_handle().await?;
        within(WAIT_LIMIT, "init of another handle", handle.init(self.options())).await?;
        Ok(handle)
    }

    /// A handle on the same storage that has not been initialised.
    pub async fn raw_handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        let handle = open_handle(&*self.storage, self.poll).await?;
        self.handles.lock().unwrap_or_else(|p| p.into_inner()).push(handle.clone());
        Ok(handle)
    }

    /// A handle with table prefix `prefix`, where the backend has prefixes.
    pub async fn handle_with_prefix(
        &self,
        prefix: &str,
    ) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        self.storage.handle_with_prefix(prefix).await
    }

    /// The clock's time, floored to milliseconds.
    pub fn now(&self) -> Timestamp {
        self.clock.now_ms()
    }

    /// Moves the clock (and, through it, the storage's time) forward.
    pub fn advance(&self, d: Duration) {
        self.clock.advance(d);
    }

    /// Enqueues `task`, asserting success and a non-empty ID; returns the stored snapshot.
    pub async fn enqueue(&self, task: Task) -> Task {
        let stored = match self.broker.enqueue(&task).await {
            Ok(stored) => stored,
            Err(e) => panic!("enqueue {:?} failed: {e}", task.id),
        };
        assert!(!stored.id.is_empty(), "enqueue returned an empty ID");
        stored
    }

    /// Reads a task, panicking when it is missing.
    pub async fn get(&self, id: &str) -> Task {
        match self.broker.get(id).await {
            Ok(t) => t,
            Err(e) => panic!("get {id:?} failed: {e}"),
        }
    }

    /// Claims from `queues`, which must succeed within 5 s with a running task and a token.
    pub async fn dequeue(&self, queues: &[&str]) -> Task {
        let claimed = match tokio::time::timeout(SAFETY_TIMEOUT, self.broker.dequeue(&queues)).await
        {
            Ok(Ok(t)) => t,
            Ok(Err(e)) => panic!("dequeue {queues:?} failed: {e}"),
            Err(_) => panic!("dequeue {queues:?}: nothing claimed within {SAFETY_TIMEOUT:?}"),
        };
        assert_eq!(claimed.status, Status::Running, "claimed task {} not running", claimed.id);
        assert!(!claimed.lease_token.is_empty(), "claimed task {} has no token", claimed.id);
        claimed
    }

    /// Asserts a dequeue on `queues` is still waiting after 100 ms (real time).
    pub async fn expect_blocked(&self, queues: &[&str]) {
        match tokio::time::timeout(REAL_WINDOW, self.broker.dequeue(&queues)).await {
            Err(_) => {}
            Ok(Ok(t)) => panic!("expected {queues:?} to block, but claimed {}", t.id),
            Ok(Err(e)) => panic!("expected {queues:?} to block, but dequeue failed: {e}"),
        }
    }

    /// Starts a dequeue in the background.
    pub fn spawn_dequeue(&self, queues: &[&str]) -> Waiter {
        spawn_dequeue_on(self.broker.clone(), queues)
    }

    /// Claims from `queue`, asserts the claim is `id`, and acks it with no result.
    pub async fn ack_by_id(&self, queue: &str, id: &str) -> Task {
        let claimed = self.dequeue(&[queue]).await;
        assert_eq!(claimed.id, id, "claim from {queue} returned the wrong task");
        if let Err(e) = self.broker.ack(id, &claimed.lease_token, None).await {
            panic!("ack {id} failed: {e}");
        }
        claimed
    }

    /// Claims from `queue`, asserts the claim is `id`, and fails it with `Skip("boom")`.
    pub async fn fail_by_id(&self, queue: &str, id: &str) -> Task {
        let claimed = self.dequeue(&[queue]).await;
        assert_eq!(claimed.id, id, "claim from {queue} returned the wrong task");
        if let Err(e) = self.broker.fail(id, &claimed.lease_token, Failure::skip("boom")).await {
            panic!("fail {id} failed: {e}");
        }
        claimed
    }

    /// Claims from `queue` and fails the claim with `kind`, message "boom", retry at now.
    pub async fn fail_now(&self, queue: &str, kind: FailKind) -> Task {
        let claimed = self.dequeue(&[queue]).await;
        let failure = Failure::new(kind, "boom", self.now());
        if let Err(e) = self.broker.fail(&claimed.id, &claimed.lease_token, failure).await {
            panic!("fail {} failed: {e}", claimed.id);
        }
        claimed
    }

    /// Closes every handle and removes the storage. Call it at the end of every case.
    pub async fn finish(self) -> Result<(), BoxError> {
        let handles = std::mem::take(&mut *self.handles.lock().unwrap_or_else(|p| p.into_inner()));
        for (k, handle) in handles.into_iter().enumerate() {
            within(WAIT_LIMIT, format!("close of handle {k}"), handle.close()).await?;
        }
        within(WAIT_LIMIT, "the storage's cleanup", self.storage.cleanup()).await
    }
}

/// A new handle on `storage`; with `poll`, one that polls that seldom (where the backend
/// polls at all).
async fn open_handle(
    storage: &dyn Storage,
    poll: Option<Duration>,
) -> Result<Arc<dyn Broker>, BoxError> {
    let Some(interval) = poll else {
        return within(WAIT_LIMIT, "a handle", storage.handle()).await;
    };
    if let Some(handle) =
        within(WAIT_LIMIT, "a slowly polling handle", storage.handle_polling_every(interval)).await
    {
        return handle;
    }
    let handle = within(WAIT_LIMIT, "a handle", storage.handle()).await?;
    if handle.capabilities().shared_storage {
        return Err(format!(
            "{} shares its storage across processes (so it polls or is notified) but its \
             Storage offers no handle_polling_every: a poll could hide a missing wake-up",
            handle.backend()
        )
        .into());
    }
    Ok(handle)
}

/// Starts a dequeue on `broker` in the background.
pub fn spawn_dequeue_on(broker: Arc<dyn Broker>, queues: &[&str]) -> Waiter {
    let queues: Vec<String> = queues.iter().map(|q| (*q).to_owned()).collect();
    let handle = tokio::spawn(async move {
        let refs: Vec<&str> = queues.iter().map(String::as_str).collect();
        broker.dequeue(&refs).await
    });
    Waiter { handle: Some(handle) }
}

/// A dequeue running in the background. Dropping it cancels the dequeue.
pub struct Waiter {
    handle: Option<JoinHandle<taskgate::Result<Task>>>,
}

impl Waiter {
    /// Asserts the dequeue has not returned after 100 ms (real time).
    pub async fn still_blocked(&mut self) {
        tokio::time::sleep(REAL_WINDOW).await;
        let finished = self.handle.as_ref().is_none_or(JoinHandle::is_finished);
        assert!(!finished, "background dequeue returned while it should still block");
    }

    /// The dequeue's result, which must arrive within 5 s.
    pub async fn result(self) -> taskgate::Result<Task> {
        self.result_for("background dequeue").await
    }

    /// Like [`Waiter::result`]; a failure names the waiter as `what`.
    pub async fn result_for(mut self, what: &str) -> taskgate::Result<Task> {
        let Some(handle) = self.handle.take() else { panic!("{what}: waiter already consumed") };
        match tokio::time::timeout(SAFETY_TIMEOUT, handle).await {
            Ok(Ok(result)) => result,
            Ok(Err(join)) => panic!("{what} panicked: {join}"),
            Err(_) => panic!("{what} returned nothing within {SAFETY_TIMEOUT:?}"),
        }
    }

    /// Cancels the dequeue (drops its future) and asserts it stopped within 5 s.
    pub async fn cancel(mut self) {
        let Some(handle) = self.handle.take() else { return };
        handle.abort();
        match tokio::time::timeout(SAFETY_TIMEOUT, handle).await {
            Ok(Err(join)) if join.is_cancelled() => {}
            Ok(Ok(Ok(t))) => panic!("cancelled dequeue claimed {} anyway", t.id),
            Ok(Ok(Err(e))) => panic!("cancelled dequeue returned an error instead: {e}"),
            Ok(Err(join)) => panic!("cancelled dequeue panicked: {join}"),
            Err(_) => panic!("cancelled dequeue did not stop within {SAFETY_TIMEOUT:?}"),
        }
    }
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(handle) = self.handle.take() {
            handle.abort();
        }
    }
}
