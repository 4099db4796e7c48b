//! Propagation (contract §5.3): when tasks reach a terminal status, their not-yet-done edges are
//! marked done and each direct child is decided with `decide_on_parent_final`; cancelled
//! children propagate in turn, so the whole subtree converges in the same transaction (an
//! iterative work queue, never recursion).

use std::collections::VecDeque;

use taskgate::decide::{decide_on_parent_final, texts, ChildAction};
use taskgate::Status;

use super::{finalize, lock_tasks, write_row, Also};
use crate::tx::{Tx, TxFail};
use crate::{Kind, Value};

/// Propagates the terminal statuses of `finished` (`(id, status)` pairs) through the tree.
pub(crate) async fn propagate(
    tx: &mut Tx<'_>,
    finished: Vec<(String, Status)>,
) -> Result<(), TxFail> {
    let mut queue: VecDeque<(String, Status)> = finished.into();
    while let Some((parent, status)) = queue.pop_front() {
        let children = open_children(tx, &parent).await?;
        if children.is_empty() {
            continue;
        }
        let sql = tx.core.sql("UPDATE {deps} SET done = 1 WHERE parent_id = ? AND done = 0");
        tx.exec(&sql, &[Value::from(&parent)]).await?;
        let ids: Vec<&str> = children.iter().map(String::as_str).collect();
        let rows = lock_tasks(tx, &ids).await?;
        for mut child in rows {
            let before = (child.task.status, child.pending_parents);
            let (pending, action) = decide_on_parent_final(
                status,
                child.task.status,
                child.task.on_parent_failure,
                child.pending_parents,
            );
            child.pending_parents = pending;
            match action {
                ChildAction::Wake => {
                    taskgate::transition(child.task.status, Status::Pending)?;
                    child.task.status = Status::Pending;
                    tx.snapshot(&child.task);
                    tx.wake();
                }
                ChildAction::Cancel if child.task.status == Status::Running => {
                    child.task.cancel_requested = true;
                }
                ChildAction::Cancel => {
                    let now = tx.now().await?;
                    finalize(&mut child, Status::Canceled, now)?;
                    child.task.last_error = texts::parent_final(&parent, status);
                    tx.snapshot(&child.task);
                    queue.push_back((child.task.id.clone(), Status::Canceled));
                }
                ChildAction::None if before == (child.task.status, child.pending_parents) => {
                    continue;
                }
                ChildAction::None => {}
            }
            write_row(tx, &child, Also::Nothing).await?;
        }
    }
    Ok(())
}

/// Open child edges of one parent, ordered by child. Argument: the parent ID.
pub(crate) const CHILDREN_SQL: &str =
    "SELECT child_id FROM {deps} WHERE parent_id = ? AND done = 0 ORDER BY child_id";

/// The children of `parent` whose edge is not done yet, ordered by child ID.
async fn open_children(tx: &mut Tx<'_>, parent: &str) -> Result<Vec<String>, TxFail> {
    let sql = tx.core.sql(CHILDREN_SQL);
    let rows = tx.fetch(&sql, &[Value::from(parent)], &[Kind::Text]).await?;
    rows.iter().map(|r| crate::value::Cols(r).text(0).map_err(TxFail::from)).collect()
}
