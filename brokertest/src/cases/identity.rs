//! Replay and the identity invariants under concurrency (contract §8).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c19_replay_basic(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c19_replay_basic is not written yet".into())
}

/// Not written yet.
pub async fn c20_replay_chain(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c20_replay_chain is not written yet".into())
}

/// Not written yet.
pub async fn c22_identity_race(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c22_identity_race is not written yet".into())
}
