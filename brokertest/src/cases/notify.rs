//! The state-change observer (contract §3.5).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c17_notify(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c17_notify is not written yet".into())
}
