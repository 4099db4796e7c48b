//! The whole contract suite against the SQLite backend (a fresh database file per case).

brokertest::contract_tests!(taskgate_sqlite::testing::SqliteFactory::new());
