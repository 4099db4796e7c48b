//! The concurrency history checker against the SQLite backend: 4 workers, each a separate
//! broker instance on one database file, 40 tasks with fan-in dependencies, 3 rounds
//! (`TASKGATE_HISTORY_ROUNDS` overrides).

use brokertest::model::{history_test, HistoryConfig};

#[test]
fn sqlite_histories_hold_the_lease_and_dependency_properties() {
    history_test(taskgate_sqlite::testing::SqliteFactory::new(), HistoryConfig::default());
}
