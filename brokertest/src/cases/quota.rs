//! The periodic hard quota (contract §9, §10.3).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn q1_quota_hard_limit(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case q1_quota_hard_limit is not written yet".into())
}

/// Not written yet.
pub async fn q2_quota_window_rotate(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case q2_quota_window_rotate is not written yet".into())
}

/// Not written yet.
pub async fn q3_quota_stale_release(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case q3_quota_stale_release is not written yet".into())
}

/// Not written yet.
pub async fn q4_quota_key_isolation(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case q4_quota_key_isolation is not written yet".into())
}

/// Not written yet.
pub async fn q5_quota_concurrent_race(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case q5_quota_concurrent_race is not written yet".into())
}
