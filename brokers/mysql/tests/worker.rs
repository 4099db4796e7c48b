//! The worker runtime's scenarios (runtime spec §12.7) against MySQL/MariaDB: one test per
//! scenario, each on a fresh table prefix.

workertest::worker_tests!(taskgate_mysql::testing::MySqlFactory::from_env());
