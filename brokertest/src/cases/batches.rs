//! Batches and cancel-safe claims (extensions §E8, §E0).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c28_batches(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c28_batches is not written yet".into())
}

/// Not written yet.
pub async fn c29_dequeue_cancel_safety(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c29_dequeue_cancel_safety is not written yet".into())
}
