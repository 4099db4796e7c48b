//! Input limits (extensions §E7).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c27_input_limits(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c27_input_limits is not written yet".into())
}
