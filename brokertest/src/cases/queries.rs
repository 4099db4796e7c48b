//! Queries: counts, filters, pagination, key history (contract §7).

use crate::{CaseResult, Factory};

/// Not written yet.
pub async fn c13_counts_consistency(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c13_counts_consistency is not written yet".into())
}

/// Not written yet.
pub async fn c14_list_filter(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c14_list_filter is not written yet".into())
}

/// Not written yet.
pub async fn c18_list_pagination(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c18_list_pagination is not written yet".into())
}

/// Not written yet.
pub async fn c21_business_key_query(factory: &dyn Factory) -> CaseResult {
    let _ = factory;
    Err("case c21_business_key_query is not written yet".into())
}
