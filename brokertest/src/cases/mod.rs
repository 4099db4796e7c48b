//! The contract cases, one `pub async fn` per rule, grouped by area. Each takes a
//! [`Factory`](crate::Factory), builds its own [`Harness`](crate::Harness), and asserts exactly
//! what the specification says.

mod admin;
mod basics;
mod batches;
mod cancel;
mod check;
mod children;
mod claims;
mod clock;
mod deps;
mod identity;
mod leases;
mod lifecycle;
mod limits;
mod names;
mod neighbours;
mod notify;
mod nul;
mod outcomes;
mod pause;
mod priority;
mod prune;
mod queries;
mod quota;
mod race;
mod resume;
mod steps;
mod wake;

pub use admin::{
    c51_audit_commits_with_mutation, c52_queue_stats, c56_audit_order_follows_changes,
};
pub use basics::{c01_round_trip, c02_business_key_idempotent, c42_business_key_after_cancel};
pub use batches::{c28_batches, c29_dequeue_cancel_safety};
pub use cancel::{
    c39_heartbeat_renews_before_canceled, c40_cancel_request_survives_retry,
    c45_ack_clears_cancel_request,
};
pub use children::c53_list_children;
pub use claims::{c03_claim_mutex, c04_blocking_dequeue, c05_delayed_task, c09_retrying_reclaim};
pub use clock::{c33_broker_now, c34_retry_after, c37_claims_by_server_clock};
pub use deps::{c10_dep_wake, c11_cascade_cancel, c12_cancel_states, c43_duplicate_parents};
pub use identity::{c19_replay_basic, c20_replay_chain, c22_identity_race, c44_replay_check_order};
pub use leases::{
    c07_lease_reap, c58_lease_deadline_in_snapshots, c59_last_heartbeat_in_snapshots,
};
pub use lifecycle::c30_lifecycle;
pub use limits::{c27_input_limits, c36_payload_limits};
pub use names::c35_names_by_bytes;
pub use neighbours::c57_failing_call_spares_its_neighbours;
pub use notify::c17_notify;
pub use nul::c55_nul_in_arguments;
pub use outcomes::{
    c06_ack_fail, c08_stale_token, c15_requeue_no_count, c16_illegal_transition, c46_retry_budget,
};
pub use pause::c25_queue_pause;
pub use priority::{
    c48_priority_orders_claims, c49_priority_survives_retry_and_replay, c50_priority_range,
};
pub use prune::c31_prune;
pub use queries::{
    c13_counts_consistency, c14_list_filter, c18_list_pagination, c21_business_key_query,
};
pub use quota::{
    c38_quota_by_server_clock, q1_quota_hard_limit, q2_quota_window_rotate, q3_quota_stale_release,
    q4_quota_key_isolation, q5_quota_concurrent_race,
};
pub use race::c32_reap_race;
pub use resume::c26_operator_resume;
pub use steps::{c23_step_checkpoint, c24_step_cancel};
pub use wake::{
    c41_writes_wake_waiters, c47_cross_process_wakeup, c54_enqueue_wakes_enough_waiters,
};
