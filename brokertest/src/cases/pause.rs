//! Queue pause (extensions §E4).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c25_queue_pause(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c25_queue_pause is not written yet".into())
}
