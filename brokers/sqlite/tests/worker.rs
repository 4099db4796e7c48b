//! The worker runtime's scenarios (runtime spec §12.7) against SQLite: one test per
//! scenario, a fresh database file each.

workertest::worker_tests!(taskgate_sqlite::testing::SqliteFactory::new());
