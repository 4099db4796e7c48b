//! Lease expiry and the reaper (contract §6).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c07_lease_reap(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c07_lease_reap is not written yet".into())
}
