//! Propagation (contract §5.3): when a task becomes terminal, its direct children are woken,
//! counted down or cancelled, and cancelled children pass it on — breadth-first with a work
//! queue, inside the same critical section, over edges not yet done.

use std::collections::VecDeque;
use std::sync::Arc;

use taskgate::decide::{decide_on_parent_final, texts, ChildAction};
use taskgate::{Result, Status};

use crate::txn::Txn;

/// Parents whose children still have to be visited, with the status they reached.
type Work = VecDeque<(Arc<str>, Status)>;

impl Txn<'_> {
    /// Converges the subtree below `root`, which just reached the terminal `status`.
    pub(crate) fn propagate(&mut self, root: &str, status: Status) -> Result<()> {
        let mut work = Work::from([(self.entry(root)?.key.clone(), status)]);
        while let Some((parent, parent_status)) = work.pop_front() {
            self.visit_children(&parent, parent_status, &mut work)?;
        }
        Ok(())
    }

    /// Applies `parent`'s final status to each of its direct children.
    fn visit_children(&mut self, parent: &Arc<str>, status: Status, work: &mut Work) -> Result<()> {
        let Some(entry) = self.state.tasks.get_mut(parent) else { return Ok(()) };
        // Taken out while the children are written (a task is never its own child).
        let children = std::mem::take(&mut entry.children);
        let outcome = children.iter().try_for_each(|c| self.visit_child(parent, status, c, work));
        if let Some(entry) = self.state.tasks.get_mut(parent) {
            entry.children = children;
        }
        outcome
    }

    /// Marks the edge `(child, parent)` done and carries out the child's decision, unless the
    /// edge was already done.
    fn visit_child(
        &mut self,
        parent: &Arc<str>,
        status: Status,
        child: &Arc<str>,
        work: &mut Work,
    ) -> Result<()> {
        let Some(entry) = self.state.tasks.get_mut(child) else { return Ok(()) };
        let Some(edge) = entry.parents.iter_mut().find(|e| e.parent == *parent) else {
            return Ok(());
        };
        if edge.done {
            return Ok(());
        }
        edge.done = true;
        let task = &entry.task;
        let (left, action) = decide_on_parent_final(
            status,
            task.status,
            task.on_parent_failure,
            entry.pending_parents,
        );
        entry.pending_parents = left;
        if action == ChildAction::Cancel && entry.task.status == Status::Running {
            entry.task.cancel_requested = true; // the worker's final write or the reaper cancels it
            return Ok(());
        }
        self.apply(action, parent, status, child, work)
    }

    /// Wakes or cancels a child that is not running.
    fn apply(
        &mut self,
        action: ChildAction,
        parent: &Arc<str>,
        status: Status,
        child: &Arc<str>,
        work: &mut Work,
    ) -> Result<()> {
        match action {
            ChildAction::None => {}
            ChildAction::Wake => {
                self.move_status(child, Status::Pending)?;
                self.note(child);
            }
            ChildAction::Cancel => {
                let text = texts::parent_final(parent, status);
                if self.finalize(child, Status::Canceled, Some(text))? {
                    work.push_back((child.clone(), Status::Canceled));
                }
            }
        }
        Ok(())
    }
}
