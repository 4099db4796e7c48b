//! Worker outcomes and lease tokens: ack, fail, requeue, stale and illegal writes (contract §3.3, §4).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c06_ack_fail(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c06_ack_fail is not written yet".into())
}

/// Not written yet.
pub async fn c08_stale_token(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c08_stale_token is not written yet".into())
}

/// Not written yet.
pub async fn c15_requeue_no_count(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c15_requeue_no_count is not written yet".into())
}

/// Not written yet.
pub async fn c16_illegal_transition(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c16_illegal_transition is not written yet".into())
}
