//! `workertest`: the worker runtime's scenarios (runtime spec §12.7, issue 16) as cases any
//! backend runs, like `brokertest` does for the broker contract.
//!
//! Every scenario is a documented `pub async fn` in [`scenarios`] that takes a
//! [`brokertest::Factory`], builds runtimes on fresh storage and asserts what the spec
//! says. A backend runs them all with one line in its tests:
//!
//! ```ignore
//! workertest::worker_tests!(taskgate_sqlite::testing::SqliteFactory::new());
//! ```
//!
//! which expands to one `#[tokio::test]` per scenario (`w01_submit_wait_result` …), so
//! `cargo test -p taskgate-sqlite --test worker w13` filters. Scenarios that move time use a
//! manual clock; the others use real time with generous deadlines that only detect hangs.

pub mod jobs;
pub mod kill;
pub mod scenarios;
pub mod txsubmit;
mod world;

use std::sync::Arc;

use brokertest::{CaseResult, Factory, Outcome, Unavailable};
use taskgate::BoxFuture;

pub use world::{eventually, task_until, within, SkewedClock, TestResult, World, DEADLINE};

/// One scenario: its stable name and how to run it.
#[derive(Clone, Copy)]
pub struct Scenario {
    /// The stable test name.
    pub name: &'static str,
    /// Runs the scenario against a factory.
    pub run: fn(Arc<dyn Factory>) -> BoxFuture<'static, CaseResult>,
}

impl std::fmt::Debug for Scenario {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Scenario").field("name", &self.name).finish()
    }
}

/// Calls `$callback!` with the scenario list, written once.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_scenarios {
    ($callback:ident ! ($($arg:tt)*)) => {
        $crate::$callback! { ($($arg)*)
            w01_submit_wait_result,
            w02_wait_gives_up_task_completes,
            w03_stats_consistency,
            w04_business_key_idempotent,
            w05_replay_flow,
            w06_throttle_isolation,
            w07_routes_pure_producer,
            w08_retry_chain,
            w09_throttled_then_success,
            w10_skip_retry,
            w11_skip_wraps_throttled,
            w12_throttled_cap,
            w13_poison_lease_cap,
            w14_slow_task_auto_renew,
            w15_pipeline_parent_results,
            w16_fan_in_group,
            w17_ignore_parent_failure,
            w18_parent_done_at_submit,
            w19_fail_fast_cascade,
            w20_missing_parent,
            w21_cancel_mid_pipeline,
            w22_cancel_running_local,
            w23_cancel_running_remote,
            w24_cancel_blocked_propagates,
            w25_cancel_final,
            w26_shutdown_graceful,
            w27_shutdown_timeout_requeues,
            w28_state_change_observer,
            w29_renew_lease_auto,
            w30_manual_heartbeat_keepalive,
            w31_manual_heartbeat_reaped,
            w32_quota_exhaustion,
            w33_quota_fail_closed,
            w34_completer_crash_reruns,
            w35_completer_lease_lost_item,
            w36_periodic_once_per_tick,
            w37_stepwise_job,
            w38_pause_honoured,
            w39_no_handler_skip,
            w40_panic_is_business_failure,
            w41_shutdown_idempotent,
            w42_config_errors,
            w43_rejected_writes_fail,
            w44_priority_orders_runs,
            w45_claimed_ahead_requeued_on_shutdown,
            w46_no_claim_ahead_when_off_or_gated,
            w47_shutdown_reports_blocking_handler,
            w48_periodic_due_by_broker_clock,
            w49_periodic_skewed_runtimes_once_per_tick,
            w50_error_text_with_nul,
            w51_held_task_cancelled_not_run,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __scenario_table {
    (() $($name:ident),* $(,)?) => {
        &[$($crate::Scenario {
            name: stringify!($name),
            run: |factory| Box::pin(async move { $crate::scenarios::$name(&*factory).await }),
        }),*]
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __worker_test_fns {
    (($factory:expr) $($name:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $name() {
                let factory: ::std::sync::Arc<dyn $crate::__Factory> =
                    ::std::sync::Arc::new($factory);
                $crate::run_scenario_test(
                    $crate::__origin!(),
                    stringify!($name),
                    factory,
                )
                .await;
            }
        )*
    };
}

#[doc(hidden)]
pub use brokertest::{origin as __origin, Factory as __Factory};

/// Expands to one `#[tokio::test]` per scenario, each against `$factory` (evaluated afresh in
/// every test; the calling crate depends on `tokio` with `macros` and `rt-multi-thread`).
#[macro_export]
macro_rules! worker_tests {
    ($factory:expr) => {
        $crate::__with_scenarios!(__worker_test_fns!($factory));
    };
}

/// Every scenario, in order.
pub static SCENARIOS: &[Scenario] = __with_scenarios!(__scenario_table!());

/// The whole-scenario limit (a hang detector).
pub const SCENARIO_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

/// The body of one generated test: runs scenario `name`, records its outcome (suite `worker`,
/// see [`brokertest::record`]), panics when it fails, skips loudly (or fails, with
/// `TASKGATE_REQUIRE_DB=1`) when the backend is unavailable.
pub async fn run_scenario_test(origin: brokertest::Origin, name: &str, factory: Arc<dyn Factory>) {
    let backend = factory.name();
    let Some(scenario) = SCENARIOS.iter().find(|s| s.name == name) else {
        panic!("unknown scenario {name}");
    };
    let outcome = match tokio::time::timeout(SCENARIO_TIMEOUT, (scenario.run)(factory)).await {
        Ok(Ok(())) => Outcome::Passed,
        Ok(Err(e)) => match e.downcast_ref::<Unavailable>() {
            Some(u) => Outcome::Skipped(u.0.clone()),
            None => Outcome::Failed(e.to_string()),
        },
        Err(_) => Outcome::Failed(format!("did not finish within {SCENARIO_TIMEOUT:?}")),
    };
    brokertest::record(origin, &backend, "worker", name, &outcome);
    match outcome {
        Outcome::Passed | Outcome::Unsupported(_) => {}
        Outcome::Skipped(why) => brokertest::skip(&format!("{backend}: {name}"), &why),
        Outcome::Failed(why) => panic!("{backend}: {name} failed: {why}"),
    }
}
