//! The whole suite against SQLite: every contract case by its stable name, the model test, the
//! history checker and the regressions, each on a fresh database file.

brokertest::contract_tests!(taskgate_sqlite::testing::SqliteFactory::new());
