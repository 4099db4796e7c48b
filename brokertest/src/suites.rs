//! The bodies of the tests [`contract_tests!`](crate::contract_tests) emits besides the cases:
//! the model test, the history checker and the regressions. Each records its outcome (see
//! [`record`](crate::record())), skips loudly through [`skip`](crate::skip()) when the database
//! is unreachable, and panics with the readable report when it fails.

use crate::model::{
    check_regressions, model_cases, run_history_check, run_model_test, HistoryConfig,
};
use crate::{Factory, Origin, Outcome};

/// The model test: `TASKGATE_MODEL_CASES` (else `default_cases`) random sequences on fresh
/// storage from `factory`, each compared step by step with the reference model.
pub fn model_suite_test<F: Factory + 'static>(origin: Origin, factory: F, default_cases: u32) {
    let backend = factory.name();
    let outcome = match run_model_test(factory, model_cases(default_cases)) {
        Ok(r) => match r.skipped {
            Some(why) => Outcome::Skipped(why),
            None => {
                eprintln!(
                    "model test against {}: {} cases passed in {:.1?} (seed {})",
                    r.backend, r.cases, r.elapsed, r.seed
                );
                Outcome::Passed
            }
        },
        Err(failure) => Outcome::Failed(failure.to_string()),
    };
    finish(origin, &backend, "model", outcome);
}

/// The history checker with the default configuration and `TASKGATE_HISTORY_ROUNDS` applied.
pub fn history_suite_test<F: Factory + 'static>(origin: Origin, factory: F) {
    let backend = factory.name();
    let outcome = match run_history_check(factory, HistoryConfig::default().with_env()) {
        Ok(r) => match r.skipped {
            Some(why) => Outcome::Skipped(why),
            None => {
                eprintln!(
                    "history check against {}: {} rounds, {} calls ({} claims, {} reaped, {} \
                     lease lost, {} dropped) in {:.1?} (seed {})",
                    r.backend,
                    r.rounds,
                    r.calls,
                    r.claims,
                    r.reaped,
                    r.lease_lost,
                    r.dropped,
                    r.elapsed,
                    r.seed
                );
                Outcome::Passed
            }
        },
        Err(failure) => Outcome::Failed(failure.to_string()),
    };
    finish(origin, &backend, "history", outcome);
}

/// Every fixed sequence the model test found, replayed on fresh storage from `factory()`.
pub fn regressions_suite_test<F: Factory + 'static>(origin: Origin, factory: impl Fn() -> F) {
    let backend = factory().name();
    let outcome = match crate::model::reachable(&factory()) {
        Ok(Some(why)) => Outcome::Skipped(why),
        Ok(None) => match check_regressions(factory) {
            Ok(()) => Outcome::Passed,
            Err(failure) => Outcome::Failed(failure.to_string()),
        },
        Err(why) => Outcome::Failed(why),
    };
    finish(origin, &backend, "regressions", outcome);
}

/// Records `outcome` under `suite` and ends the test as it says.
fn finish(origin: Origin, backend: &str, suite: &str, outcome: Outcome) {
    crate::record(origin, backend, suite, suite, &outcome);
    match outcome {
        Outcome::Passed | Outcome::Unsupported(_) => {}
        Outcome::Skipped(why) => crate::skip(&format!("{backend}: {suite}"), &why),
        Outcome::Failed(why) => panic!("{why}"),
    }
}
