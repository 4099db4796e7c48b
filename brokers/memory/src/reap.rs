//! The reaper (contract §6): expired leases — cancel-requested ones first, then the rest —
//! and the defensive repair of blocked tasks (§5.4).

use std::sync::Arc;

use taskgate::decide::{reap_outcome, submit_decision, texts, ReapOutcome, SubmitDecision};
use taskgate::{Result, Status};

use crate::txn::Txn;

impl Txn<'_> {
    /// Handles every expired lease, repairs blocked tasks; returns the expired leases handled.
    pub(crate) fn reap(&mut self) -> Result<u64> {
        let expired = self.expired();
        let (flagged, plain): (Vec<_>, Vec<_>) = expired.into_iter().partition(|(_, f)| *f);
        let mut handled = 0u64;
        for (id, _) in flagged.iter().chain(&plain) {
            if self.reap_one(id)? {
                handled += 1;
            }
        }
        self.repair()?;
        Ok(handled)
    }

    /// Running tasks whose lease ended strictly before now, with their cancel flag, by ID.
    fn expired(&self) -> Vec<(Arc<str>, bool)> {
        let now = self.now.as_millis();
        let running = self.state.index.running.iter().filter_map(|slot| {
            let entry = self.state.tasks.at(*slot)?;
            (entry.lease_until < now).then(|| (entry.key.clone(), entry.task.cancel_requested))
        });
        let mut expired: Vec<_> = running.collect();
        expired.sort_unstable();
        expired
    }

    /// Applies the reap decision to one expired task; false when it no longer runs.
    fn reap_one(&mut self, id: &str) -> Result<bool> {
        let cap = self.opts.lease_lost_max;
        let entry = self.entry_mut(id)?;
        if entry.task.status != Status::Running {
            return Ok(false);
        }
        match reap_outcome(entry.task.cancel_requested, entry.task.lease_lost, cap) {
            ReapOutcome::Canceled => {
                self.finish(id, Status::Canceled, Some(texts::CANCELED.to_owned()))?;
            }
            ReapOutcome::Failed { lease_lost, last_error } => {
                entry.task.lease_lost = lease_lost;
                self.finish(id, Status::Failed, Some(last_error))?;
            }
            ReapOutcome::Pending { lease_lost } => {
                entry.task.lease_lost = lease_lost;
                entry.task.cancel_requested = false;
                let run_at = entry.task.run_at;
                self.release(id, Status::Pending, run_at)?;
            }
        }
        Ok(true)
    }

    /// Re-runs the submit decision for every blocked task whose parents all exist (§5.4).
    fn repair(&mut self) -> Result<()> {
        let blocked: Vec<Arc<str>> = self.state.index.blocked.iter().cloned().collect();
        blocked.iter().try_for_each(|id| self.repair_one(id))
    }

    /// Wakes, cancels (with propagation) or recounts one blocked task. Its edges are re-armed
    /// to match: done exactly for the parents that are terminal.
    fn repair_one(&mut self, id: &str) -> Result<()> {
        let Some(entry) = self.state.tasks.get(id) else { return Ok(()) };
        if entry.task.status != Status::Blocked {
            return Ok(()); // cancelled by an earlier repair's propagation
        }
        let parents: Option<Vec<Status>> =
            entry.parents.iter().map(|e| self.state.status_of(&e.parent)).collect();
        let missing =
            entry.task.distinct_parents().iter().any(|p| !self.state.tasks.contains_key(p));
        let (Some(statuses), false) = (parents, missing) else { return Ok(()) };
        let named = entry.parents.iter().zip(&statuses).map(|(e, s)| (&*e.parent, *s));
        let decision = submit_decision(named, entry.task.on_parent_failure);
        let entry = self.entry_mut(id)?;
        for (edge, status) in entry.parents.iter_mut().zip(&statuses) {
            edge.done = status.is_terminal();
        }
        entry.pending_parents = decision.pending_parents();
        match decision {
            SubmitDecision::Blocked { .. } => Ok(()),
            SubmitDecision::Pending => {
                let run_at = entry.task.run_at;
                self.move_task(id, Status::Pending, run_at)?;
                self.note(id);
                Ok(())
            }
            SubmitDecision::Canceled { last_error } => {
                self.finish(id, Status::Canceled, Some(last_error))
            }
        }
    }
}
