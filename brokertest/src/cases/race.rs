//! The reaper racing a finishing worker (extensions §E16).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c32_reap_race(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c32_reap_race is not written yet".into())
}
