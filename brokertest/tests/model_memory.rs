//! The model-based test (extensions §E12) against the in-memory backend: 256 random sequences
//! by default (`TASKGATE_MODEL_CASES` overrides), each compared step by step with the model.

#[test]
fn memory_matches_the_model() {
    brokertest::model::model_test(taskgate_memory::testing::MemoryFactory, 256);
}

/// The shrunk failures the model test found (on any backend), replayed as fixed sequences.
#[test]
fn fixed_sequences_found_by_the_model_hold() {
    if let Err(failure) =
        brokertest::model::check_regressions(|| taskgate_memory::testing::MemoryFactory)
    {
        panic!("{failure}");
    }
}
