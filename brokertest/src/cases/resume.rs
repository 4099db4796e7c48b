//! Operator resume (extensions §E5).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c26_operator_resume(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c26_operator_resume is not written yet".into())
}
