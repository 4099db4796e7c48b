//! The whole suite and the worker runtime's scenarios through PgBouncer in transaction mode
//! (`TASKGATE_PGBOUNCER_URL`, `?pooler=transaction&listen_url=<direct URL>`; `ci/pgbouncer.sh`
//! starts PgBouncer and exports it): every contract case by its stable name, the model test,
//! the history checker and the regressions, then every worker scenario, each on a fresh table
//! prefix, under the backend name `postgres-pgbouncer`. Unset, every test skips loudly (and
//! fails under `TASKGATE_REQUIRE_DB=1`).

/// The contract suite through the pooler.
mod contract {
    brokertest::contract_tests!(
        taskgate_postgres::testing::PgFactory::pgbouncer_from_env(),
        model_cases = 32
    );
}

/// The worker runtime's scenarios through the pooler.
mod worker {
    workertest::worker_tests!(taskgate_postgres::testing::PgFactory::pgbouncer_from_env());
}
