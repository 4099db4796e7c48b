//! Replay (contract §8.3) and operator resume (extensions §E5).

use taskgate::decide::{check_replay, check_resume, resume_decision};
use taskgate::{id, Error, ReplayRequest, Status, Task};

use super::{decode_all, lock_statuses, lock_task, mark_has_children, release, write_row, Also};
use crate::row::{TaskRow, TASK_KINDS};
use crate::tx::{Tx, TxFail};
use crate::{Kind, Value};

/// Locks the replay target: by ID, or the key's chain tail ("the row no row replays").
async fn locate(tx: &mut Tx<'_>, req: &ReplayRequest) -> Result<TaskRow, TxFail> {
    if !req.execution_id.is_empty() {
        let row = lock_task(tx, &req.execution_id).await?;
        return row.ok_or_else(|| Error::not_found(&req.execution_id).into());
    }
    let sql = tx.core.sql(
        "SELECT {cols} FROM {tasks} WHERE business_key = ? AND NOT EXISTS \
         (SELECT 1 FROM {tasks} c WHERE c.replay_of = {tasks}.id){lock}",
    );
    let rows = decode_all(&tx.fetch(&sql, &[Value::from(&req.business_key)], &TASK_KINDS).await?)?;
    rows.into_iter().next().ok_or_else(|| Error::not_found(&req.business_key).into())
}

/// True when some execution replays `id`.
async fn is_replayed(tx: &mut Tx<'_>, id: &str) -> Result<bool, TxFail> {
    let sql = tx.core.sql("SELECT id FROM {tasks} WHERE replay_of = ?");
    Ok(!tx.fetch(&sql, &[Value::from(id)], &[Kind::Text]).await?.is_empty())
}

/// Replay: checks in the contract's order, then a new pending execution; the target is not
/// written.
pub(crate) async fn replay(tx: &mut Tx<'_>, req: &ReplayRequest) -> Result<Task, TxFail> {
    let target = locate(tx, req).await?;
    let replayed = is_replayed(tx, &target.task.id).await?;
    check_replay(&target.task.id, target.task.status, replayed, req.allow_completed)?;
    let now = tx.now().await?;
    let old = &target.task;
    let task = Task {
        id: id::new_ulid(),
        business_key: old.business_key.clone(),
        replay_of: old.id.clone(),
        task_type: old.task_type.clone(),
        queue: old.queue.clone(),
        payload: req.payload.clone().or_else(|| old.payload.clone()),
        max_retry: old.max_retry,
        on_parent_failure: old.on_parent_failure,
        owner: old.owner.clone(),
        priority: req.priority.unwrap_or(old.priority),
        status: Status::Pending,
        run_at: now,
        created_at: now,
        ..Task::default()
    };
    let row = TaskRow { task, pending_parents: 0, lease_until: 0 };
    super::enqueue::insert_rows(tx, std::slice::from_ref(&row)).await?;
    tx.snapshot(&row.task);
    tx.wake();
    Ok(row.task)
}

/// Resume: same ID back to pending or blocked, counters zeroed, edges re-armed.
///
/// Locks the parents before the task, the order propagation takes (a finishing parent, then
/// its children), and reads the parents' statuses under their locks: a parent finishing at
/// the same time either committed first (its edge is re-armed done) or waits and then sees
/// `has_children` (§5.2).
pub(crate) async fn resume(tx: &mut Tx<'_>, id: &str) -> Result<Task, TxFail> {
    let parents = stored_parents(tx, id).await?;
    let refs: Vec<&str> = parents.iter().map(String::as_str).collect();
    let found = lock_statuses(tx, &refs).await?;
    let mut row = lock_task(tx, id).await?.ok_or_else(|| Error::not_found(id))?;
    let replayed = is_replayed(tx, id).await?;
    check_resume(id, row.task.status, replayed)?;
    let mut ordered = Vec::with_capacity(refs.len());
    for p in &refs {
        match found.iter().find(|(pid, _)| pid == p) {
            Some((pid, s)) => ordered.push((pid.as_str(), *s)),
            None => {
                let reason = format!("parent {p} no longer exists");
                return Err(Error::NotResumable { id: id.to_owned(), reason }.into());
            }
        }
    }
    let decision = resume_decision(id, ordered.iter().copied(), row.task.on_parent_failure)?;
    let now = tx.now().await?;
    taskgate::transition(row.task.status, decision.status())?;
    let t = &mut row.task;
    t.status = decision.status();
    (t.attempts, t.lease_lost, t.throttled) = (0, 0, 0);
    t.cancel_requested = false;
    t.finished_at = None;
    t.resumes = t.resumes.saturating_add(1);
    t.run_at = now;
    row.pending_parents = decision.pending_parents();
    release(&mut row);
    rearm_edges(tx, id, &ordered).await?;
    write_row(tx, &row, Also::Nothing).await?;
    tx.snapshot(&row.task);
    if row.task.status == Status::Pending {
        tx.wake();
    }
    Ok(row.task)
}

/// The distinct parents of `id` from its stored list, read without a lock (`depends_on`
/// never changes); `NotFound` when the task does not exist.
async fn stored_parents(tx: &mut Tx<'_>, id: &str) -> Result<Vec<String>, TxFail> {
    let sql = tx.core.sql("SELECT depends_on FROM {tasks} WHERE id = ?");
    let rows = tx.fetch(&sql, &[Value::from(id)], &[Kind::Text]).await?;
    let row = rows.first().ok_or_else(|| Error::not_found(id))?;
    let list = crate::row::parse_depends_on(&crate::value::Cols(row).text(0)?)?;
    let mut seen = std::collections::HashSet::new();
    Ok(list.into_iter().filter(|p| seen.insert(p.clone())).collect())
}

/// Replaces the child's edges with one per parent: `done` = 1 for terminal parents, 0 for the
/// others (docs/decisions.md), which get `has_children`. Rows are written anew, not updated:
/// a parent pruned and enqueued again under its ID lost its edges with the prune. The caller
/// holds the parents' row locks and read their statuses under them.
pub(crate) async fn rearm_edges(
    tx: &mut Tx<'_>,
    child: &str,
    parents: &[(&str, Status)],
) -> Result<(), TxFail> {
    let sql = tx.core.sql("DELETE FROM {deps} WHERE child_id = ?");
    tx.exec(&sql, &[Value::from(child)]).await?;
    super::enqueue::insert_edges(tx, child, parents).await?;
    mark_has_children(tx, parents).await
}
