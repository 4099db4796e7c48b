//! The forced-interleaving races of `brokertest::races` that apply to a store without
//! transactions to hold open: memory's hook runs after each critical section (see
//! `MemoryRaceRig`), so it runs the race that observes and fails a call at its commit points.
//! The others hold a commit open while B runs, which a mutex-guarded store cannot do without
//! blocking B's thread; memory's single critical section per call is what they would prove.

use brokertest::races::{audit_atomic_race, run_race};
use brokertest::CaseResult;
use taskgate_memory::testing::MemoryRaceRig;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn race_audit() -> CaseResult {
    run_race("race_audit", audit_atomic_race(&MemoryRaceRig)).await
}
