//! The whole suite against the in-memory backend: every contract case by its stable name, the
//! model test, the history checker and the regressions (a fresh store each).

brokertest::contract_tests!(taskgate_memory::testing::MemoryFactory);
