//! The model-based test (extensions §E12) and the concurrency history checker against
//! MySQL/MariaDB: 64 random sequences by default (`TASKGATE_MODEL_CASES` overrides), each on a
//! fresh table prefix; histories with 4 workers on separate handles, 3 rounds
//! (`TASKGATE_HISTORY_ROUNDS` overrides); and the shrunk failures the model found, kept as
//! fixed sequences.

use brokertest::model::{check_regressions, history_test, model_test, HistoryConfig};
use taskgate_mysql::testing::MySqlFactory;

#[test]
fn mysql_matches_the_model() {
    model_test(MySqlFactory::from_env(), 64);
}

#[test]
fn mysql_histories_hold_the_lease_and_dependency_properties() {
    history_test(MySqlFactory::from_env(), HistoryConfig::default());
}

/// The shrunk failures the model test found (on any backend), replayed as fixed sequences.
#[test]
fn fixed_sequences_found_by_the_model_hold() {
    if let Err(failure) = check_regressions(MySqlFactory::from_env) {
        panic!("{failure}");
    }
}
