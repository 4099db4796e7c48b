//! `brokertest`: the taskgate contract as executable cases.
//!
//! Every rule of the broker contract is a documented `pub async fn` in [`cases`] that takes a
//! [`Factory`] and asserts exactly what the specification says. A backend proves itself with
//! one line in its tests:
//!
//! ```ignore
//! brokertest::contract_tests!(my_backend::TestFactory::new());
//! ```
//!
//! which expands to one `#[tokio::test]` per case with the stable names `c01_round_trip` …
//! `c54_enqueue_wakes_enough_waiters`, `q1_quota_hard_limit` … `q5_quota_concurrent_race` (so
//! `cargo test -p my-backend c07` filters, and one failure hides no other). [`run_all`] runs the
//! same list in-process and reports per case; `taskgate check <url>` prints that report.
//!
//! A case that needs what a backend declares it lacks ([`Need`], read from
//! [`Broker::capabilities`]) is reported [`Outcome::Unsupported`], never passed or failed; a
//! backend that declares a capability the suite must control in a test (a server clock,
//! storage shared across processes) provides the [`Storage`] seam for it.
//!
//! The contract's race cases start many calls at once and catch a broken critical section when
//! the scheduler interleaves them badly. A backend that can hold a write transaction at its
//! commit also runs [`races`] ([`race_tests!`]), which force each race into its bad
//! interleaving once; [`model`] holds the reference model and the history checker.
//!
//! Each case gets fresh, isolated storage from the factory and a [`ManualClock`](taskgate::ManualClock)
//! starting at 2026-01-01T00:00:00Z; time only moves when the case advances it. The only real
//! waits are the 100 ms "still blocked" window, the 5 s safety timeout on every expected
//! result, and the notify case's 10 ms polling.
//!
//! Nothing waits without a deadline: a case ends as failed after [`CASE_TIMEOUT`]; waits that
//! are not one expected result (joining a claim loop, opening or removing storage, closing a
//! handle) get [`WAIT_LIMIT`] through [`within`], which fails naming what it waited for;
//! backend-specific tests bound their whole body with [`TEST_LIMIT`]. The model test and the
//! history checker bound every call, round and run (see [`model`]).

pub mod cases;
mod cleanup;
mod deadline;
mod harness;
pub mod model;
pub mod races;
mod record;
mod report;
mod skip;
mod suites;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use taskgate::{BoxError, BoxFuture, Broker, Capabilities, Timestamp};

pub use cleanup::Tracked;
pub use deadline::{within, TEST_LIMIT, WAIT_LIMIT};
pub use harness::{spawn_dequeue_on, task, Harness, Waiter, REAL_WINDOW, SAFETY_TIMEOUT};
pub use record::{record, Origin, REPORT_VAR};
pub use report::{
    case_names, run_all, run_case_test, run_matching, CaseReport, Outcome, CASE_TIMEOUT,
};
pub use skip::{or_skip, require_db, skip, OPTED_OUT};
pub use suites::{history_suite_test, model_suite_test, regressions_suite_test};

/// What every case returns: `Ok` when it passed. Assertion failures panic with a message.
pub type CaseResult = Result<(), BoxError>;

/// Hands each case fresh, isolated storage.
#[async_trait]
pub trait Factory: Send + Sync {
    /// A short name for reports (`memory`, `sqlite`, `postgres`, `mysql`).
    fn name(&self) -> String;

    /// Fresh, empty storage no other case sees (a new instance, a temp file, a random table
    /// prefix). Return [`Unavailable`] when the backend cannot run here (no database server).
    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError>;
}

/// A shared factory is a factory: `contract_tests!(factory())` may pick its backend at run
/// time (`brokertest`'s own `tests/suite.rs` reads `BROKERTEST_URL`).
#[async_trait]
impl<F: Factory + ?Sized> Factory for Arc<F> {
    fn name(&self) -> String {
        (**self).name()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        (**self).storage().await
    }
}

/// One case's storage: it opens broker handles on it and removes it at the end.
#[async_trait]
pub trait Storage: Send + Sync {
    /// A new broker handle on this storage, constructed but **not** initialised. Every call
    /// returns a separate handle (a second connection pool, a second instance on the same
    /// file), so race cases can use two.
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError>;

    /// A handle built with table prefix `prefix`, for backends that have prefixes (`None`
    /// otherwise). An invalid prefix must fail with `InvalidInput` naming `prefix`.
    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        let _ = prefix;
        None
    }

    /// A handle (constructed, not initialised) whose waiting claimers look for other
    /// handles' writes only every `interval` of real time, so a case can prove that a write
    /// wakes this handle's own waiters at once instead of a poll finding it later (c41, c47).
    /// `None` (the default) where the backend never polls (memory). A backend whose storage
    /// other processes share (`capabilities().shared_storage`) finds their writes by polling
    /// or notifications, and must provide it: those cases fail otherwise.
    async fn handle_polling_every(
        &self,
        interval: Duration,
    ) -> Option<Result<Arc<dyn Broker>, BoxError>> {
        let _ = interval;
        None
    }

    /// The storage's own clock, set by the test, for a backend whose time is a database
    /// server's (`capabilities().server_clock`): handles from it read the server's time from
    /// the returned [`ServerClock`], starting at `start`, whatever their local clocks say
    /// (c37, c38). `None` (the default) where the only clock is the local one (memory,
    /// SQLite): those cases then check that every time is the local clock's. A backend that
    /// declares a server clock must provide it: those cases fail otherwise.
    async fn server_clock(
        &self,
        start: Timestamp,
    ) -> Option<Result<Box<dyn ServerClock>, BoxError>> {
        let _ = start;
        None
    }

    /// Removes the storage (drops tables, deletes files). Called after the case closed its
    /// handles.
    async fn cleanup(&self) -> Result<(), BoxError> {
        Ok(())
    }
}

/// The database server's clock under a test's control (see [`Storage::server_clock`]): on
/// PostgreSQL a function shadowing `clock_timestamp()` through `search_path`, on MySQL/MariaDB
/// `SET timestamp` on every session. It stands still until [`ServerClock::set`] moves it.
/// Removed with its storage.
#[async_trait]
pub trait ServerClock: Send + Sync {
    /// A new handle on the storage (constructed, not initialised) whose server time is this
    /// clock's.
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError>;

    /// Sets the server's time; every statement of every handle from [`ServerClock::handle`]
    /// that starts afterwards reads it.
    async fn set(&self, at: Timestamp) -> Result<(), BoxError>;
}

/// What a case needs beyond the core contract, as a backend declares it in
/// [`Broker::capabilities`]. A case on a backend that declares it does not have it ends as
/// [`Outcome::Unsupported`] (neither passed nor failed); a backend that declares it but does
/// not deliver it (quota without a `quota_provider()`) fails.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Periodic quota (`capabilities().quota` and a `quota_provider()`).
    Quota,
    /// Writes on one handle wake waiting claimers of another at once
    /// (`capabilities().cross_process_wakeups`).
    CrossProcessWakeups,
    /// Audited operator actions (`capabilities().audit`).
    Audit,
}

impl Need {
    /// Whether `caps` declares this need.
    pub fn declared(self, caps: Capabilities) -> bool {
        match self {
            Need::Quota => caps.quota,
            Need::CrossProcessWakeups => caps.cross_process_wakeups,
            Need::Audit => caps.audit,
        }
    }

    /// Why `broker` cannot run a case needing this: `Ok` when it declares and delivers it,
    /// `Err(Unsupported)` when it declares it does not have it, another error when the
    /// declaration is not kept.
    pub fn check(self, broker: &dyn Broker) -> Result<(), BoxError> {
        let backend = broker.backend();
        if !self.declared(broker.capabilities()) {
            return Err(Box::new(Unsupported(format!("{backend} declares no {self}"))));
        }
        match self {
            Need::Quota if broker.quota_provider().is_none() => Err(format!(
                "{backend} declares quota in capabilities() but quota_provider() is None"
            )
            .into()),
            _ => Ok(()),
        }
    }
}

impl std::fmt::Display for Need {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Need::Quota => "quota",
            Need::CrossProcessWakeups => "cross-process wake-ups",
            Need::Audit => "audit",
        })
    }
}

/// Returned by a case whose [`Need`] the backend declares it does not have; reported as
/// [`Outcome::Unsupported`].
#[derive(Debug)]
pub struct Unsupported(pub String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unsupported: {}", self.0)
    }
}

impl std::error::Error for Unsupported {}

/// Returned by [`Factory::storage`] when the backend's database is not reachable. Cases then
/// skip loudly, or fail when `TASKGATE_REQUIRE_DB=1`.
#[derive(Debug)]
pub struct Unavailable(pub String);

impl std::fmt::Display for Unavailable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "backend unavailable: {}", self.0)
    }
}

impl std::error::Error for Unavailable {}

/// One entry of the case list: its stable name and how to run it.
#[derive(Clone, Copy)]
pub struct Case {
    /// The stable test name (`c01_round_trip`, …).
    pub name: &'static str,
    /// Runs the case against a factory.
    pub run: fn(Arc<dyn Factory>) -> BoxFuture<'static, CaseResult>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish()
    }
}

/// Calls `$callback!` with the whole case list, written once: the table [`CASES`] and the
/// [`contract_tests!`] macro both expand from it.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_cases {
    ($callback:ident ! ($($arg:tt)*)) => {
        $crate::$callback! { ($($arg)*)
            c01_round_trip,
            c02_business_key_idempotent,
            c03_claim_mutex,
            c04_blocking_dequeue,
            c05_delayed_task,
            c06_ack_fail,
            c07_lease_reap,
            c08_stale_token,
            c09_retrying_reclaim,
            c10_dep_wake,
            c11_cascade_cancel,
            c12_cancel_states,
            c13_counts_consistency,
            c14_list_filter,
            c15_requeue_no_count,
            c16_illegal_transition,
            c17_notify,
            c18_list_pagination,
            c19_replay_basic,
            c20_replay_chain,
            c21_business_key_query,
            c22_identity_race,
            c23_step_checkpoint,
            c24_step_cancel,
            c25_queue_pause,
            c26_operator_resume,
            c27_input_limits,
            c28_batches,
            c29_dequeue_cancel_safety,
            c30_lifecycle,
            c31_prune,
            c32_reap_race,
            c33_broker_now,
            c34_retry_after,
            c35_names_by_bytes,
            c36_payload_limits,
            c37_claims_by_server_clock,
            c38_quota_by_server_clock,
            c39_heartbeat_renews_before_canceled,
            c40_cancel_request_survives_retry,
            c41_writes_wake_waiters,
            c42_business_key_after_cancel,
            c43_duplicate_parents,
            c44_replay_check_order,
            c45_ack_clears_cancel_request,
            c46_retry_budget,
            c47_cross_process_wakeup,
            c48_priority_orders_claims,
            c49_priority_survives_retry_and_replay,
            c50_priority_range,
            c51_audit_commits_with_mutation,
            c52_queue_stats,
            c53_list_children,
            c54_enqueue_wakes_enough_waiters,
            c55_nul_in_arguments,
            c56_audit_order_follows_changes,
            c57_failing_call_spares_its_neighbours,
            c58_lease_deadline_in_snapshots,
            c59_last_heartbeat_in_snapshots,
            q1_quota_hard_limit,
            q2_quota_window_rotate,
            q3_quota_stale_release,
            q4_quota_key_isolation,
            q5_quota_concurrent_race,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case_table {
    (() $($name:ident),* $(,)?) => {
        &[$($crate::Case {
            name: stringify!($name),
            run: |factory| Box::pin(async move { $crate::cases::$name(&*factory).await }),
        }),*]
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __contract_test_fns {
    (($factory:expr, $model_cases:expr) $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let factory: ::std::sync::Arc<dyn $crate::Factory> =
                    ::std::sync::Arc::new($factory);
                $crate::run_case_test($crate::origin!(), stringify!($name), factory).await;
            }
        )*

        /// The model test (extensions §E12): random operation sequences compared step by step
        /// with the reference model (`TASKGATE_MODEL_CASES` overrides the count).
        #[test]
        fn model() {
            $crate::model_suite_test($crate::origin!(), $factory, $model_cases);
        }

        /// The concurrency history checker: workers on separate handles, properties checked
        /// over the recorded calls (`TASKGATE_HISTORY_ROUNDS` overrides the rounds).
        #[test]
        fn history() {
            $crate::history_suite_test($crate::origin!(), $factory);
        }

        /// The shrunk failures the model test found (on any backend), replayed as fixed
        /// sequences.
        #[test]
        fn regressions() {
            $crate::regressions_suite_test($crate::origin!(), || $factory);
        }
    };
}

/// Expands to the whole suite against `$factory` (an expression evaluated afresh in every
/// test; the calling crate depends on `tokio` with the `macros` and `rt-multi-thread`
/// features), with the same test names on every backend:
///
/// * one `#[tokio::test]` per contract case, by its stable name (`c01_round_trip` …);
/// * `model`: the model test, `model_cases` random sequences (default
///   [`DEFAULT_MODEL_CASES`]; `TASKGATE_MODEL_CASES` overrides);
/// * `history`: the concurrency history checker;
/// * `regressions`: the model's fixed sequences.
///
/// Every outcome is recorded for CI's count (see [`record`](crate::record())).
///
/// ```ignore
/// brokertest::contract_tests!(taskgate_memory::testing::MemoryFactory);
/// brokertest::contract_tests!(taskgate_postgres::testing::PgFactory::from_env(), model_cases = 64);
/// ```
#[macro_export]
macro_rules! contract_tests {
    ($factory:expr) => {
        $crate::contract_tests!($factory, model_cases = $crate::DEFAULT_MODEL_CASES);
    };
    ($factory:expr, model_cases = $cases:expr) => {
        $crate::__with_cases!(__contract_test_fns!($factory, $cases));
    };
}

/// Random sequences the generated `model` test runs unless told otherwise.
pub const DEFAULT_MODEL_CASES: u32 = 256;

/// Every case, in suite order.
pub static CASES: &[Case] = __with_cases!(__case_table!());
