//! The whole suite against MySQL/MariaDB: every contract case by its stable name, the model
//! test (64 random sequences; `TASKGATE_MODEL_CASES` overrides), the history checker and the
//! regressions, each on a fresh table prefix (the server in `TASKGATE_MYSQL_URL`, else a MySQL
//! 8.4 container, else loud skips — failures with `TASKGATE_REQUIRE_DB=1`).

brokertest::contract_tests!(taskgate_mysql::testing::MySqlFactory::from_env(), model_cases = 64);
