//! The whole contract suite (every case by its stable name) against MySQL/MariaDB: the server
//! in `TASKGATE_MYSQL_URL`, else a MySQL 8.4 container, else loud skips (failures with
//! `TASKGATE_REQUIRE_DB=1`).

brokertest::contract_tests!(taskgate_mysql::testing::MySqlFactory::from_env());
