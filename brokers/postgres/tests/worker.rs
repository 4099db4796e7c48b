//! The worker runtime's scenarios (runtime spec §12.7) against PostgreSQL: one test per
//! scenario, each on a fresh table prefix.

workertest::worker_tests!(taskgate_postgres::testing::PgFactory::from_env());
