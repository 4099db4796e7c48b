//! ReapExpired (contract §6) and defensive repair (§5.4): expired leases are locked and
//! re-checked under the lock (a task finished meanwhile is not a candidate any more), decided
//! with `reap_outcome`, written and propagated; then blocked tasks are re-decided from their
//! stored parent lists.

use taskgate::decide::{reap_outcome, submit_decision, texts, ReapOutcome, SubmitDecision};
use taskgate::Status;

use super::propagate::propagate;
use super::replay::rearm_edges;
use super::{decode_all, finish, lock_statuses, release, write_row, Also};
use crate::core::{Tx, TxFail};
use crate::row::{TaskRow, TASK_KINDS};
use crate::value::Cols;
use crate::{Kind, Value};

/// Expired leases (`lease_until < now`, strictly), locked. Argument: now.
pub(crate) const REAP_SQL: &str = "SELECT {cols} FROM {tasks} WHERE status = 'running' \
    AND lease_until < ? ORDER BY id{skip_locked}";

/// Blocked tasks for defensive repair, locked.
pub(crate) const BLOCKED_SQL: &str =
    "SELECT {cols} FROM {tasks} WHERE status = 'blocked' ORDER BY id{lock}";

/// Steps 0 and 1: returns how many expired leases were handled.
pub(crate) async fn reap_expired(tx: &mut Tx<'_>) -> Result<u64, TxFail> {
    let now = tx.now().await?;
    let sql = tx.core.sql(REAP_SQL);
    let rows = decode_all(&tx.fetch(&sql, &[Value::from(now)], &TASK_KINDS).await?)?;
    let mut handled = 0u64;
    let mut finished = Vec::new();
    for mut row in rows {
        let t = &row.task;
        match reap_outcome(t.cancel_requested, t.lease_lost, tx.opts.lease_lost_max) {
            ReapOutcome::Canceled => {
                finish(&mut row, Status::Canceled, now)?;
                row.task.last_error = texts::CANCELED.to_owned();
            }
            ReapOutcome::Failed { lease_lost, last_error } => {
                finish(&mut row, Status::Failed, now)?;
                row.task.lease_lost = lease_lost;
                row.task.last_error = last_error;
            }
            ReapOutcome::Pending { lease_lost } => {
                taskgate::transition(row.task.status, Status::Pending)?;
                row.task.status = Status::Pending;
                row.task.lease_lost = lease_lost;
                row.task.cancel_requested = false;
                release(&mut row);
            }
        }
        write_row(tx, &row, Also::Nothing).await?;
        tx.snapshot(&row.task);
        if row.task.status.is_terminal() {
            finished.push((row.task.id.clone(), row.task.status));
        }
        handled += 1;
    }
    if handled > 0 {
        tx.wake();
    }
    propagate(tx, finished).await?;
    Ok(handled)
}

/// Step 2: defensive repair of blocked tasks (contract §5.4).
pub(crate) async fn repair_blocked(tx: &mut Tx<'_>) -> Result<(), TxFail> {
    let sql = tx.core.sql(BLOCKED_SQL);
    let rows = decode_all(&tx.fetch(&sql, &[], &TASK_KINDS).await?)?;
    for row in rows {
        repair_one(tx, row).await?;
    }
    Ok(())
}

async fn repair_one(tx: &mut Tx<'_>, mut row: TaskRow) -> Result<(), TxFail> {
    let parents = row.task.distinct_parents();
    let found = lock_statuses(tx, &parents).await?;
    if found.len() != parents.len() {
        return Ok(());
    }
    let ordered = parents
        .iter()
        .filter_map(|p| found.iter().find(|(id, _)| id == p).map(|(id, s)| (id.as_str(), *s)));
    let ordered: Vec<(&str, Status)> = ordered.collect();
    let decision = submit_decision(ordered.iter().copied(), row.task.on_parent_failure);
    sync_edges(tx, &row.task.id, &ordered).await?;
    match decision {
        SubmitDecision::Pending => {
            taskgate::transition(row.task.status, Status::Pending)?;
            row.task.status = Status::Pending;
            row.pending_parents = 0;
            tx.snapshot(&row.task);
            tx.wake();
        }
        SubmitDecision::Canceled { last_error } => {
            let now = tx.now().await?;
            finish(&mut row, Status::Canceled, now)?;
            row.task.last_error = last_error;
            tx.snapshot(&row.task);
        }
        SubmitDecision::Blocked { pending_parents } if pending_parents == row.pending_parents => {
            return Ok(());
        }
        SubmitDecision::Blocked { pending_parents } => row.pending_parents = pending_parents,
    }
    write_row(tx, &row, Also::Nothing).await?;
    if row.task.status == Status::Canceled {
        propagate(tx, vec![(row.task.id.clone(), Status::Canceled)]).await?;
    }
    Ok(())
}

/// Makes `child`'s edges agree with its parents: done exactly for the terminal ones (as
/// resume re-arms them), so the recounted `pending_parents` and later propagation match.
/// Writes only when an edge differs.
async fn sync_edges(
    tx: &mut Tx<'_>,
    child: &str,
    parents: &[(&str, Status)],
) -> Result<(), TxFail> {
    let sql = tx.core.sql("SELECT parent_id, done FROM {deps} WHERE child_id = ?");
    let edges = tx.fetch(&sql, &[Value::from(child)], &[Kind::Text, Kind::Int]).await?;
    let mut differs = false;
    for edge in &edges {
        let c = Cols(edge);
        let (parent, done) = (c.text(0)?, c.int(1)? != 0);
        let terminal = parents.iter().find(|(p, _)| *p == parent).map(|(_, s)| s.is_terminal());
        differs |= terminal.is_some_and(|t| t != done);
    }
    if differs {
        rearm_edges(tx, child, parents).await?;
    }
    Ok(())
}
