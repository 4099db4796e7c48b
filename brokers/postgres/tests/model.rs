//! The model-based test (extensions §E12) against PostgreSQL: random operation sequences
//! (64 by default; `TASKGATE_MODEL_CASES` overrides), each on a fresh table prefix, compared
//! step by step with brokertest's reference model.

#[test]
fn postgres_matches_the_model() {
    brokertest::model::model_test(taskgate_postgres::testing::PgFactory::from_env(), 64);
}
