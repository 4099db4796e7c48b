//! Model-based tests (extensions §E12) against PostgreSQL: random operation sequences (64 by
//! default; `TASKGATE_MODEL_CASES` overrides), each on a fresh table prefix and compared step by
//! step with brokertest's reference model; the history checker with several handles at once;
//! and the shrunk failures the model found, kept as fixed sequences.

use brokertest::model::{check_regressions, history_test, HistoryConfig};
use taskgate_postgres::testing::PgFactory;

#[test]
fn postgres_matches_the_model() {
    brokertest::model::model_test(PgFactory::from_env(), 64);
}

#[test]
fn concurrent_histories_on_postgres_are_consistent() {
    history_test(PgFactory::from_env(), HistoryConfig::default());
}

/// The shrunk failures the model test found (on any backend), replayed as fixed sequences.
#[test]
fn fixed_sequences_found_by_the_model_hold() {
    if let Err(failure) = check_regressions(PgFactory::from_env) {
        panic!("{failure}");
    }
}
