//! Init and close (contract §3.2).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c30_lifecycle(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c30_lifecycle is not written yet".into())
}
