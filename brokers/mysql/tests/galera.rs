//! The whole suite across the nodes of a MariaDB Galera cluster (issue 39): every contract
//! case, the model test, the history checker, the regressions and the worker scenarios, with
//! handle *i* of each case on node *i* mod 3 (`TASKGATE_GALERA_URLS`, started by
//! `ci/galera.sh`; unset ⇒ loud skips, failures with `TASKGATE_REQUIRE_DB=1`). Reported as the
//! backend `mysql-galera`.

brokertest::contract_tests!(
    taskgate_mysql::testing::MySqlFactory::galera_from_env(),
    model_cases = 64
);
workertest::worker_tests!(taskgate_mysql::testing::MySqlFactory::galera_from_env());
