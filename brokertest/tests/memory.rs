//! The whole contract suite against the in-memory backend.

brokertest::contract_tests!(taskgate_memory::testing::MemoryFactory);
