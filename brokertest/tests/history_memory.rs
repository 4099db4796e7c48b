//! The concurrency history checker against the in-memory backend: 4 workers on separate
//! handles, 40 tasks with fan-in dependencies, 3 rounds (`TASKGATE_HISTORY_ROUNDS` overrides).

use brokertest::model::{history_test, HistoryConfig};

#[test]
fn memory_histories_hold_the_lease_and_dependency_properties() {
    history_test(taskgate_memory::testing::MemoryFactory, HistoryConfig::default());
}
