//! Declared capabilities select cases: a case needing what a backend declares it lacks is
//! reported unsupported (not passed, not failed), and a backend whose declaration is not kept
//! fails. Proven on the memory backend behind a wrapper that declares what the test says.

use std::sync::Arc;

use async_trait::async_trait;
use brokertest::{run_case_test, run_matching, Factory, Outcome, Storage};
use taskgate::{
    AckItem, BoxError, Broker, BrokerOptions, Capabilities, Counts, Failure, Filter, Limits,
    PruneRequest, QueueList, QuotaProvider, ReplayRequest, Result, Step, Task, Timestamp,
};
use taskgate_memory::testing::MemoryFactory;

/// Memory, declaring `caps`, with its quota provider only when `provider`.
#[derive(Clone, Copy)]
struct Declaring {
    caps: Capabilities,
    provider: bool,
}

#[async_trait]
impl Factory for Declaring {
    fn name(&self) -> String {
        "declaring".to_owned()
    }

    async fn storage(&self) -> std::result::Result<Box<dyn Storage>, BoxError> {
        Ok(Box::new(DeclaringStorage { inner: MemoryFactory.storage().await?, how: *self }))
    }
}

struct DeclaringStorage {
    inner: Box<dyn Storage>,
    how: Declaring,
}

#[async_trait]
impl Storage for DeclaringStorage {
    async fn handle(&self) -> std::result::Result<Arc<dyn Broker>, BoxError> {
        Ok(Arc::new(Declared { inner: self.inner.handle().await?, how: self.how }))
    }
}

struct Declared {
    inner: Arc<dyn Broker>,
    how: Declaring,
}

#[async_trait]
impl Broker for Declared {
    fn backend(&self) -> &'static str {
        "declaring"
    }
    async fn init(&self, options: BrokerOptions) -> Result<()> {
        self.inner.init(options).await
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
    async fn now(&self) -> Result<Timestamp> {
        self.inner.now().await
    }
    fn limits(&self) -> Result<Limits> {
        self.inner.limits()
    }
    async fn enqueue_many(&self, tasks: &[Task]) -> Result<Vec<Task>> {
        self.inner.enqueue_many(tasks).await
    }
    async fn try_dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>> {
        self.inner.try_dequeue_many(queues, max).await
    }
    async fn dequeue_many(&self, queues: &dyn QueueList, max: usize) -> Result<Vec<Task>> {
        self.inner.dequeue_many(queues, max).await
    }
    async fn ack_many(&self, items: &[AckItem]) -> Result<Vec<Result<()>>> {
        self.inner.ack_many(items).await
    }
    async fn fail(&self, id: &str, token: &str, failure: Failure) -> Result<()> {
        self.inner.fail(id, token, failure).await
    }
    async fn cancel(&self, id: &str) -> Result<()> {
        self.inner.cancel(id).await
    }
    async fn finish_canceled(&self, id: &str, token: &str) -> Result<()> {
        self.inner.finish_canceled(id, token).await
    }
    async fn requeue(&self, id: &str, token: &str) -> Result<()> {
        self.inner.requeue(id, token).await
    }
    async fn heartbeat(&self, id: &str, token: &str) -> Result<()> {
        self.inner.heartbeat(id, token).await
    }
    async fn save_step(&self, id: &str, token: &str, step: Step) -> Result<()> {
        self.inner.save_step(id, token, step).await
    }
    async fn get(&self, id: &str) -> Result<Task> {
        self.inner.get(id).await
    }
    async fn replay(&self, request: ReplayRequest) -> Result<Task> {
        self.inner.replay(request).await
    }
    async fn resume(&self, id: &str) -> Result<Task> {
        self.inner.resume(id).await
    }
    async fn list(&self, filter: &Filter) -> Result<Vec<Task>> {
        self.inner.list(filter).await
    }
    async fn queue_len(&self, queue: &str) -> Result<u64> {
        self.inner.queue_len(queue).await
    }
    async fn counts(&self) -> Result<Counts> {
        self.inner.counts().await
    }
    async fn reap_expired(&self) -> Result<u64> {
        self.inner.reap_expired().await
    }
    async fn pause_queue(&self, queue: &str) -> Result<()> {
        self.inner.pause_queue(queue).await
    }
    async fn resume_queue(&self, queue: &str) -> Result<()> {
        self.inner.resume_queue(queue).await
    }
    async fn paused_queues(&self) -> Result<Vec<String>> {
        self.inner.paused_queues().await
    }
    async fn prune(&self, request: PruneRequest) -> Result<u64> {
        self.inner.prune(request).await
    }
    fn capabilities(&self) -> Capabilities {
        self.how.caps
    }
    fn quota_provider(&self) -> Option<&dyn QuotaProvider> {
        self.how.provider.then(|| self.inner.quota_provider()).flatten()
    }
}

const QUOTA_CASES: [&str; 6] = [
    "c38_quota_by_server_clock",
    "q1_quota_hard_limit",
    "q2_quota_window_rotate",
    "q3_quota_stale_release",
    "q4_quota_key_isolation",
    "q5_quota_concurrent_race",
];

async fn outcomes(how: Declaring, names: &[&str]) -> Vec<(&'static str, Outcome)> {
    let factory: Arc<dyn Factory> = Arc::new(how);
    let reports = run_matching(factory, |name| names.contains(&name)).await;
    assert_eq!(reports.len(), names.len(), "cases run: {reports:?}");
    reports.into_iter().map(|r| (r.name, r.outcome)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_declaring_no_quota_reports_the_quota_cases_unsupported() {
    let how = Declaring { caps: Capabilities::NONE, provider: false };
    for (name, outcome) in outcomes(how, &QUOTA_CASES).await {
        match outcome {
            Outcome::Unsupported(why) => assert_eq!(why, "declaring declares no quota", "{name}"),
            other => panic!("{name}: expected unsupported, got {other:?}"),
        }
    }
    let others = outcomes(how, &["c01_round_trip", "c37_claims_by_server_clock"]).await;
    assert!(others.iter().all(|(_, o)| *o == Outcome::Passed), "{others:?}");
    // The generated test passes, with a loud line.
    run_case_test(brokertest::origin!(), "q1_quota_hard_limit", Arc::new(how)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_declaring_quota_without_a_provider_fails_the_quota_cases() {
    let how = Declaring { caps: Capabilities::NONE.with_quota(true), provider: false };
    for (name, outcome) in outcomes(how, &QUOTA_CASES).await {
        match outcome {
            Outcome::Failed(why) => {
                assert!(why.contains("quota_provider() is None"), "{name}: {why}")
            }
            other => panic!("{name}: expected a failure, got {other:?}"),
        }
    }
    let kept = Declaring { caps: Capabilities::NONE.with_quota(true), provider: true };
    let passed = outcomes(kept, &QUOTA_CASES).await;
    assert!(passed.iter().all(|(_, o)| *o == Outcome::Passed), "{passed:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_process_wake_ups_run_only_where_declared() {
    let none = Declaring { caps: Capabilities::NONE, provider: false };
    let got = outcomes(none, &["c47_cross_process_wakeup"]).await;
    assert!(matches!(got[0].1, Outcome::Unsupported(_)), "{got:?}");
    // Memory handles on one store share their wake-ups, so the declaration holds.
    let caps = Capabilities::NONE.with_cross_process_wakeups(true);
    let got = outcomes(Declaring { caps, provider: false }, &["c47_cross_process_wakeup"]).await;
    assert_eq!(got[0].1, Outcome::Passed, "{got:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_declared_server_clock_or_shared_storage_needs_its_test_hook() {
    let caps = Capabilities::NONE.with_server_clock(true);
    let got = outcomes(Declaring { caps, provider: false }, &["c37_claims_by_server_clock"]).await;
    match &got[0].1 {
        Outcome::Failed(why) => assert!(why.contains("offers no server_clock"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
    let caps = Capabilities::NONE.with_shared_storage(true);
    let got = outcomes(Declaring { caps, provider: false }, &["c41_writes_wake_waiters"]).await;
    match &got[0].1 {
        Outcome::Failed(why) => assert!(why.contains("no handle_polling_every"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn audit_runs_only_where_declared_and_fails_where_declared_but_not_kept() {
    let none = Declaring { caps: Capabilities::NONE, provider: false };
    let got = outcomes(none, &["c51_audit_commits_with_mutation"]).await;
    match &got[0].1 {
        Outcome::Unsupported(why) => assert_eq!(why, "declaring declares no audit"),
        other => panic!("expected unsupported, got {other:?}"),
    }
    // `Declared` does not forward `audited`: the trait's provided method refuses, so a
    // declaration without an implementation fails the case.
    let caps = Capabilities::NONE.with_audit(true);
    let got =
        outcomes(Declaring { caps, provider: false }, &["c51_audit_commits_with_mutation"]).await;
    match &got[0].1 {
        Outcome::Failed(why) => assert!(why.contains("does not record audits"), "{why}"),
        other => panic!("expected a failure, got {other:?}"),
    }
}
