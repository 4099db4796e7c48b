//! Retention (extensions §E16).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c31_prune(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c31_prune is not written yet".into())
}
