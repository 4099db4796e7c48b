//! The whole suite against PostgreSQL: every contract case by its stable name, the model test
//! (64 random sequences; `TASKGATE_MODEL_CASES` overrides), the history checker and the
//! regressions, each on a fresh table prefix (`TASKGATE_PG_URL`, a testcontainer, or a loud
//! skip).

brokertest::contract_tests!(taskgate_postgres::testing::PgFactory::from_env(), model_cases = 64);
