//! The contract suite against PostgreSQL: one test per case, by its stable name, each on a
//! fresh table prefix (`TASKGATE_PG_URL`, a testcontainer, or a loud skip).

brokertest::contract_tests!(taskgate_postgres::testing::PgFactory::from_env());
