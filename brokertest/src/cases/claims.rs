//! Claiming: exclusion, blocking, delays, retry re-claims (contract §3.4 Dequeue).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c03_claim_mutex(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c03_claim_mutex is not written yet".into())
}

/// Not written yet.
pub async fn c04_blocking_dequeue(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c04_blocking_dequeue is not written yet".into())
}

/// Not written yet.
pub async fn c05_delayed_task(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c05_delayed_task is not written yet".into())
}

/// Not written yet.
pub async fn c09_retrying_reclaim(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c09_retrying_reclaim is not written yet".into())
}
