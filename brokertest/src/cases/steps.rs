//! Stepwise tasks (extensions §E3).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c23_step_checkpoint(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c23_step_checkpoint is not written yet".into())
}

/// Not written yet.
pub async fn c24_step_cancel(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c24_step_cancel is not written yet".into())
}
