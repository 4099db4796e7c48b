//! ReapExpired (contract §6) and defensive repair (§5.4): expired leases are locked and
//! re-checked under the lock (a task finished meanwhile is not a candidate any more), decided
//! with `reap_outcome`, written and propagated; then blocked tasks are re-decided from their
//! stored parent lists.

use std::collections::HashMap;

use taskgate::decide::{reap_outcome, submit_decision, texts, ReapOutcome, SubmitDecision};
use taskgate::Status;

use super::propagate::propagate;
use super::replay::rearm_edges;
use super::{decode_all, finalize, lock_statuses_skip, release, write_row, Also};
use crate::dialect::placeholders;
use crate::row::{TaskRow, TASK_KINDS};
use crate::tx::{Tx, TxFail};
use crate::value::Cols;
use crate::{Kind, Value};

/// Expired leases (`lease_until < now`, strictly), locked. Argument: now.
pub(crate) const REAP_SQL: &str = "SELECT {cols} FROM {tasks} WHERE status = 'running' \
    AND lease_until < ? ORDER BY id{skip_locked}";

/// Blocked tasks for defensive repair, read without locks: repair locks parents before
/// children (propagation's order) and never waits for a row (see [`repair_blocked`]).
pub(crate) const BLOCKED_SQL: &str =
    "SELECT {cols} FROM {tasks} WHERE status = 'blocked' ORDER BY id";

/// Blocked tasks repaired per round of locks.
const REPAIR_CHUNK: usize = 200;

/// One reaper pass (contract §6): expired leases handled, then blocked tasks whose parents
/// all finished repaired. Returns how many expired leases were handled.
pub(crate) async fn reap(tx: &mut Tx<'_>) -> Result<u64, TxFail> {
    let handled = reap_expired(tx).await?;
    repair_blocked(tx).await?;
    Ok(handled)
}

/// Steps 0 and 1: returns how many expired leases were handled.
pub(crate) async fn reap_expired(tx: &mut Tx<'_>) -> Result<u64, TxFail> {
    let now = tx.now().await?;
    let sql = tx.core.sql(REAP_SQL);
    let rows = decode_all(&tx.fetch(&sql, &[Value::from(now)], &TASK_KINDS).await?)?;
    let mut handled = 0u64;
    let mut finished = Vec::new();
    let mut requeued = false;
    for mut row in rows {
        let t = &row.task;
        match reap_outcome(t.cancel_requested, t.lease_lost, tx.opts.lease_lost_max) {
            ReapOutcome::Canceled => {
                finalize(&mut row, Status::Canceled, now)?;
                row.task.last_error = texts::CANCELED.to_owned();
            }
            ReapOutcome::Failed { lease_lost, last_error } => {
                finalize(&mut row, Status::Failed, now)?;
                row.task.lease_lost = lease_lost;
                row.task.last_error = last_error;
            }
            ReapOutcome::Pending { lease_lost } => {
                taskgate::transition(row.task.status, Status::Pending)?;
                row.task.status = Status::Pending;
                row.task.lease_lost = lease_lost;
                row.task.cancel_requested = false;
                release(&mut row);
                requeued = true;
            }
        }
        write_row(tx, &row, Also::Nothing).await?;
        tx.snapshot(&row.task);
        if row.task.status.is_terminal() {
            finished.push((row.task.id.clone(), row.task.status));
        }
        handled += 1;
    }
    if requeued {
        tx.wake();
    }
    propagate(tx, finished).await?;
    Ok(handled)
}

/// Step 2: defensive repair of blocked tasks (contract §5.4).
///
/// A finisher holds its task and then locks the children; repair takes the same order
/// (parents, then the blocked child) and with `SKIP LOCKED`: a blocked task whose parent or
/// itself is held by another transaction is left for the next round (whoever holds it is
/// deciding it). So the reaper never waits for a finisher's row and never deadlocks with one.
pub(crate) async fn repair_blocked(tx: &mut Tx<'_>) -> Result<(), TxFail> {
    let sql = tx.core.sql(BLOCKED_SQL);
    let rows = decode_all(&tx.fetch(&sql, &[], &TASK_KINDS).await?)?;
    for chunk in rows.chunks(REPAIR_CHUNK) {
        repair_chunk(tx, chunk).await?;
    }
    Ok(())
}

/// Locks the parents of `candidates`, then the candidates still blocked, skipping rows other
/// transactions hold, and repairs every candidate whose parents all got locked.
async fn repair_chunk(tx: &mut Tx<'_>, candidates: &[TaskRow]) -> Result<(), TxFail> {
    let mut parents: Vec<&str> =
        candidates.iter().flat_map(|r| r.task.distinct_parents()).collect();
    parents.sort_unstable();
    parents.dedup();
    let mut statuses: HashMap<String, Status> = HashMap::with_capacity(parents.len());
    for chunk in parents.chunks(500) {
        statuses.extend(lock_statuses_skip(tx, chunk).await?);
    }
    let ids: Vec<&str> = candidates.iter().map(|r| r.task.id.as_str()).collect();
    let children = lock_blocked_skip(tx, &ids).await?;
    let edges = edges_of(tx, &ids).await?;
    for child in children {
        let parents = child.task.distinct_parents();
        let found: Option<Vec<(&str, Status)>> =
            parents.iter().map(|p| statuses.get(*p).map(|s| (*p, *s))).collect();
        // A missing parent cannot be decided (§5.4); a busy one is decided by its holder.
        let Some(found) = found else { continue };
        let own = edges.get(child.task.id.as_str()).map(Vec::as_slice).unwrap_or_default();
        repair_one(tx, child.clone(), &found, own).await?;
    }
    Ok(())
}

async fn repair_one(
    tx: &mut Tx<'_>,
    mut row: TaskRow,
    parents: &[(&str, Status)],
    edges: &[(String, bool)],
) -> Result<(), TxFail> {
    let decision = submit_decision(parents.iter().copied(), row.task.on_parent_failure);
    sync_edges(tx, &row.task.id, parents, edges).await?;
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
            finalize(&mut row, Status::Canceled, now)?;
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

/// Those of `ids` still blocked and held by no other transaction, locked (in ID order).
async fn lock_blocked_skip(tx: &mut Tx<'_>, ids: &[&str]) -> Result<Vec<TaskRow>, TxFail> {
    let sql = tx.core.sql_sized("lock_blocked_skip", (ids.len(), 0), || {
        format!(
            "SELECT {{cols}} FROM {{tasks}} WHERE id IN ({}) AND status = 'blocked' \
             ORDER BY id{{skip_locked}}",
            placeholders(ids.len())
        )
    });
    let args: Vec<Value> = ids.iter().map(|id| Value::from(*id)).collect();
    decode_all(&tx.fetch(&sql, &args, &TASK_KINDS).await?)
}

/// The edges `(parent, done)` of each of `children`.
async fn edges_of(
    tx: &mut Tx<'_>,
    children: &[&str],
) -> Result<HashMap<String, Vec<(String, bool)>>, TxFail> {
    let sql = tx.core.sql_sized("edges_of", (children.len(), 0), || {
        format!(
            "SELECT child_id, parent_id, done FROM {{deps}} WHERE child_id IN ({})",
            placeholders(children.len())
        )
    });
    let args: Vec<Value> = children.iter().map(|id| Value::from(*id)).collect();
    let rows = tx.fetch(&sql, &args, &[Kind::Text, Kind::Text, Kind::Int]).await?;
    let mut edges: HashMap<String, Vec<(String, bool)>> = HashMap::new();
    for r in &rows {
        let c = Cols(r);
        edges.entry(c.text(0)?).or_default().push((c.text(1)?, c.int(2)? != 0));
    }
    Ok(edges)
}

/// Makes `child`'s edges agree with its parents: done exactly for the terminal ones (as
/// resume re-arms them), so the recounted `pending_parents` and later propagation match.
/// Writes only when an edge differs.
async fn sync_edges(
    tx: &mut Tx<'_>,
    child: &str,
    parents: &[(&str, Status)],
    edges: &[(String, bool)],
) -> Result<(), TxFail> {
    let differs = edges.iter().any(|(parent, done)| {
        let terminal = parents.iter().find(|(p, _)| p == parent).map(|(_, s)| s.is_terminal());
        terminal.is_some_and(|t| t != *done)
    });
    if differs {
        rearm_edges(tx, child, parents).await?;
    }
    Ok(())
}
