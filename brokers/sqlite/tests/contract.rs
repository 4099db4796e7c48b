//! The whole contract suite against SQLite: one test per case, a fresh file each.

brokertest::contract_tests!(taskgate_sqlite::testing::SqliteFactory::new());
