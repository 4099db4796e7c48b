//! Dependencies: wake-ups, cascades, cancel in every state (contract §5, §3.4 Cancel).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c10_dep_wake(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c10_dep_wake is not written yet".into())
}

/// Not written yet.
pub async fn c11_cascade_cancel(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c11_cascade_cancel is not written yet".into())
}

/// Not written yet.
pub async fn c12_cancel_states(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c12_cancel_states is not written yet".into())
}
