//! The model's terminal writes and what follows them: propagation to children (contract §5.3),
//! the reaper's three steps (§6) and defensive repair of blocked tasks (§5.4).

use std::collections::VecDeque;

use taskgate::decide::{submit_decision, SubmitDecision};
use taskgate::{OnParentFailure, Status};

use super::call::Fault;
use super::state::{Edge, Entry, Model};
use super::write::{distinct, release, set_status};

impl Model {
    /// A terminal write: the status, `finished_at = now`, no lease, no cancel request, the
    /// given `last_error` (if any); then propagation in the same unit.
    pub(crate) fn finish(
        &mut self,
        id: &str,
        status: Status,
        last_error: Option<String>,
    ) -> Result<(), Fault> {
        let now = self.now;
        let entry = self.entry_mut(id)?;
        set_status(&mut entry.task, status)?;
        entry.task.finished_at = Some(now);
        entry.task.cancel_requested = false;
        if let Some(text) = last_error {
            entry.task.last_error = text;
        }
        release(entry);
        self.propagate(id, status)
    }

    /// The breadth-first work queue of §5.3: each parent's open edges, children in ID order,
    /// until the affected subtree has converged.
    fn propagate(&mut self, root: &str, status: Status) -> Result<(), Fault> {
        let mut queue = VecDeque::from([(root.to_owned(), status)]);
        while let Some((parent, parent_status)) = queue.pop_front() {
            let children = self.names_where(|e| open_edge(e, &parent));
            for child in children {
                if self.on_parent_final(&child, &parent, parent_status)? {
                    queue.push_back((child, Status::Canceled));
                }
            }
        }
        Ok(())
    }

    /// One child's reaction to a finished parent (`decideOnParentFinal`); true when the child
    /// was cancelled (its own children follow).
    fn on_parent_final(
        &mut self,
        child: &str,
        parent: &str,
        parent_status: Status,
    ) -> Result<bool, Fault> {
        let now = self.now;
        let entry = self.entry_mut(child)?;
        entry.edges.iter_mut().filter(|e| e.parent == parent).for_each(|e| e.done = true);
        let status = entry.task.status;
        if status.is_terminal() || !parent_status.is_terminal() {
            return Ok(false);
        }
        let satisfied = parent_status == Status::Completed
            || entry.task.on_parent_failure == OnParentFailure::IgnoreParentFailure;
        if satisfied {
            entry.pending_parents = entry.pending_parents.saturating_sub(1);
            if entry.pending_parents == 0 && status == Status::Blocked {
                set_status(&mut entry.task, Status::Pending)?;
            }
            return Ok(false);
        }
        if status == Status::Running {
            entry.task.cancel_requested = true;
            return Ok(false);
        }
        set_status(&mut entry.task, Status::Canceled)?;
        entry.task.last_error = format!("parent {parent} {parent_status}");
        entry.task.finished_at = Some(now);
        entry.task.cancel_requested = false;
        release(entry);
        Ok(true)
    }

    /// `reap_expired()`: step 0 (cancel-requested expiries), step 1 (ordinary expiries),
    /// step 2 (defensive repair); returns the number of expiries handled. Each step walks its
    /// candidates in ID order, re-reading every task when it gets to it.
    pub(crate) fn reap(&mut self) -> Result<u64, Fault> {
        let now = self.now;
        let expired = |e: &Entry| e.task.status == Status::Running && e.lease_until < now;
        let step0 = self.names_where(|e| expired(e) && e.task.cancel_requested);
        for name in &step0 {
            self.finish(name, Status::Canceled, Some("canceled".to_owned()))?;
        }
        let step1 = self.names_where(expired);
        for name in &step1 {
            self.expire(name)?;
        }
        self.repair()?;
        Ok(u64::try_from(step0.len() + step1.len()).unwrap_or(u64::MAX))
    }

    fn expire(&mut self, name: &str) -> Result<(), Fault> {
        let cap = self.options.lease_lost_max;
        let entry = self.entry_mut(name)?;
        if entry.task.cancel_requested {
            return self.finish(name, Status::Canceled, Some("canceled".to_owned()));
        }
        entry.task.lease_lost += 1;
        let n = entry.task.lease_lost;
        if n >= cap {
            return self.finish(name, Status::Failed, Some(format!("lease expired {n} times")));
        }
        set_status(&mut entry.task, Status::Pending)?;
        release(entry);
        Ok(())
    }

    /// Step 2: every blocked task whose parents all exist gets the submit decision again,
    /// and its edges are re-armed to match (done exactly for the terminal parents), so the
    /// recounted `pending_parents` is always the number of open edges.
    fn repair(&mut self) -> Result<(), Fault> {
        for name in self.names_where(|e| e.task.status == Status::Blocked) {
            let entry = self.entry(&name)?;
            if entry.task.status != Status::Blocked {
                continue;
            }
            let parents = distinct(&entry.task.depends_on);
            let statuses: Option<Vec<(String, Status)>> =
                parents.into_iter().map(|p| self.status_of(&p).map(|s| (p, s))).collect();
            let Some(statuses) = statuses else { continue };
            let policy = entry.task.on_parent_failure;
            let decision = submit_decision(statuses.iter().map(|(p, s)| (p.as_str(), *s)), policy);
            let entry = self.entry_mut(&name)?;
            entry.edges = statuses
                .into_iter()
                .map(|(parent, s)| Edge { parent, done: s.is_terminal() })
                .collect();
            self.apply_repair(&name, decision)?;
        }
        Ok(())
    }

    fn apply_repair(&mut self, name: &str, decision: SubmitDecision) -> Result<(), Fault> {
        let entry = self.entry_mut(name)?;
        entry.pending_parents = decision.pending_parents();
        match decision {
            SubmitDecision::Pending => set_status(&mut entry.task, Status::Pending),
            SubmitDecision::Blocked { .. } => Ok(()),
            SubmitDecision::Canceled { last_error } => {
                self.finish(name, Status::Canceled, Some(last_error))
            }
        }
    }
}

fn open_edge(entry: &Entry, parent: &str) -> bool {
    entry.edges.iter().any(|e| e.parent == parent && !e.done)
}
