//! pgbench's raw ceiling for PostgreSQL claim+ack (issue 13 measured PostgreSQL's batch 1
//! against it): the same work as the report's raw ceiling, driven by `pgbench`, PostgreSQL's
//! own C client, so neither sqlx nor tokio is in the client's cost.
//!
//! Each pgbench transaction is one claim of `batch` tasks and its completion, two autocommit
//! statements (two commits per claim, like the report's raw ceiling):
//!
//! ```sql
//! UPDATE <tasks> SET status = 'running', …, lease_until = :tok
//!   WHERE id IN (SELECT id … ORDER BY run_at, id LIMIT <batch> FOR UPDATE SKIP LOCKED)
//!   RETURNING <every task column>;
//! UPDATE <tasks> SET status = 'completed', … WHERE status = 'running' AND lease_until = :tok;
//! ```
//!
//! `:tok` is unique per transaction, so the completion finds exactly the claim's rows through
//! the `(status, lease_until)` index of running tasks, as an ack finds its tasks by ID. The
//! rate is the tasks completed during the run ÷ its length.

use std::time::Duration;

use taskgate_sql::row::TASK_COLUMNS;

use crate::backend::{Bed, RawPool};
use crate::drive::Spec;
use crate::Result;

/// Whether `pgbench` runs here (it comes with PostgreSQL's client package).
pub fn available() -> bool {
    std::process::Command::new("pgbench")
        .arg("--version")
        .output()
        .is_ok_and(|out| out.status.success())
}

/// The pgbench script of one claim of `batch` tasks from `queue` of `table` and its
/// completion.
pub fn script(table: &str, queue: &str, batch: usize) -> String {
    format!(
        "\\set tok 4000000000000000 + :client_id * 1000000000 + random(1, 999999999)\n\
         UPDATE {table} SET status = 'running', lease_token = 'pgbench', lease_until = :tok, \
         started_at = 1 WHERE id IN (SELECT id FROM {table} WHERE queue = '{queue}' AND status \
         IN ('pending', 'retrying') AND run_at <= 9000000000000 ORDER BY run_at, id LIMIT \
         {batch} FOR UPDATE SKIP LOCKED) RETURNING {TASK_COLUMNS};\n\
         UPDATE {table} SET status = 'completed', finished_at = 1, lease_token = '', \
         lease_until = 0 WHERE status = 'running' AND lease_until = :tok;\n"
    )
}

/// Runs `spec` (one queue) with pgbench on `bed`'s PostgreSQL tasks table, whose ready tasks
/// wait in [`Spec::queue`]`(0)` (filled by the caller, enough for the run): a short
/// warm-up (every client claims a few times), then `secs` whole seconds measured. Returns
/// the jobs per second and whether the backlog ran out (then the rate is a floor).
pub async fn claim_ack(bed: &Bed, url: &str, spec: Spec, secs: u32) -> Result<(f64, bool)> {
    let RawPool::Postgres(pool) = &bed.raw else {
        return Err("pgbench's ceiling is PostgreSQL's".into());
    };
    let table = bed.tasks_table();
    let queue = Spec::queue(0);
    let dir = tempfile::Builder::new().prefix("taskgate-pgbench-").tempdir()?;
    let path = dir.path().join("claim_ack.sql");
    std::fs::write(&path, script(&table, &queue, spec.batch))?;
    let count = format!("SELECT COUNT(*) FROM {table} WHERE status = 'completed'");
    let ready = format!("SELECT COUNT(*) FROM {table} WHERE queue = $1 AND status = 'pending'");
    let clients = spec.claimers.to_string();
    let threads = spec.claimers.min(2).to_string();
    let run = |length: &[&str]| {
        let mut cmd = tokio::process::Command::new("pgbench");
        cmd.args(["-n", "-M", "prepared", "-c", &clients, "-j", &threads, "-f"])
            .arg(&path)
            .args(length)
            .arg(url)
            .kill_on_drop(true);
        cmd.output()
    };
    let warm = run(&["-t", "5"]).await?;
    if !warm.status.success() {
        return Err(failed(&warm).into());
    }
    let before: i64 = sqlx::query_scalar(&count).fetch_one(pool).await?;
    let secs_arg = secs.max(1).to_string();
    let out = tokio::time::timeout(
        Duration::from_secs(u64::from(secs.max(1)) + 60),
        run(&["-T", &secs_arg]),
    )
    .await
    .map_err(|_| "pgbench ran a minute past its length")??;
    if !out.status.success() {
        return Err(failed(&out).into());
    }
    let after: i64 = sqlx::query_scalar(&count).fetch_one(pool).await?;
    let left: i64 = sqlx::query_scalar(&ready).bind(&queue).fetch_one(pool).await?;
    let jobs = after.saturating_sub(before) as f64;
    Ok((jobs / f64::from(secs.max(1)), left == 0))
}

fn failed(out: &std::process::Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr);
    let last = err.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no message");
    format!("pgbench failed ({}): {last}", out.status)
}
