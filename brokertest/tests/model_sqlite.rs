//! The model-based test (extensions §E12) against the SQLite backend: 256 random sequences by
//! default (`TASKGATE_MODEL_CASES` overrides), each on a fresh database file.

#[test]
fn sqlite_matches_the_model() {
    brokertest::model::model_test(taskgate_sqlite::testing::SqliteFactory::new(), 256);
}

/// The shrunk failures the model test found (on any backend), replayed as fixed sequences.
#[test]
fn fixed_sequences_found_by_the_model_hold() {
    if let Err(failure) =
        brokertest::model::check_regressions(taskgate_sqlite::testing::SqliteFactory::new)
    {
        panic!("{failure}");
    }
}
