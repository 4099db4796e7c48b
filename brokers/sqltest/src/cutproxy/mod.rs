//! [`CutProxy`]: a TCP proxy for tests that cuts a broker's connection to its database server
//! where a transaction commits (`proxy.rs`), and the checks every server backend runs through
//! it (`checks.rs`, `connect.rs`).

mod checks;
mod connect;
mod proxy;

pub use checks::{
    check_commit_cuts, check_lost_answer_then_outage, check_other_writes_report_unknown,
    check_unreachable_fails_fast, check_unresolved_commits,
};
pub use connect::{check_connect_bounds, Connectors};
pub use proxy::{closed_port, start_for_url, Cut, CutProxy, MYSQL_COMMIT, PG_COMMIT};
/// Re-exported from the engine, where it belongs: callers of a shipped broker use it too.
pub use taskgate_sql::is_commit_unknown;
