//! The worker runtime's scenarios (runtime spec §12.7) against the memory broker: one test
//! per scenario, a fresh store each.

workertest::worker_tests!(taskgate_memory::testing::MemoryFactory);
