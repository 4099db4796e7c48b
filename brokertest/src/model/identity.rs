//! The model's operator calls on finished tasks: replay (contract §8.3), operator resume
//! (extensions §E5) and retention (§E16, with the rules of docs/decisions.md).

use std::collections::{BTreeSet, HashSet};

use taskgate::decide::{submit_decision, SubmitDecision};
use taskgate::{ErrorKind, PruneRequest, ReplayRequest, Status, Task, Timestamp};

use super::call::Fault;
use super::state::{Edge, Entry, Model};
use super::write::{distinct, release, set_status};

/// What a prune may delete: units (a key-less task, or a keyed chain that goes whole) in
/// list order, and the call's limit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct PrunePlan {
    pub(crate) units: Vec<Vec<String>>,
    pub(crate) limit: usize,
}

impl PrunePlan {
    /// True when the limit leaves the backend a choice of which units go.
    pub(crate) fn is_open(&self) -> bool {
        self.limit != 0 && self.units.iter().map(Vec::len).sum::<usize>() > self.limit
    }

    /// The model's own choice: units in list order, each taken when it still fits.
    pub(crate) fn greedy(&self) -> BTreeSet<String> {
        let mut chosen = BTreeSet::new();
        for unit in &self.units {
            if self.limit == 0 || chosen.len() + unit.len() <= self.limit {
                chosen.extend(unit.iter().cloned());
            }
        }
        chosen
    }

    /// Checks a backend's choice: whole units only, within the limit, and no unit left out
    /// that would still have fitted (so any "take what fits" order is accepted).
    pub(crate) fn check_choice(&self, deleted: &BTreeSet<String>) -> Result<(), String> {
        let mut covered = 0;
        for unit in &self.units {
            let inside = unit.iter().filter(|n| deleted.contains(*n)).count();
            if inside != 0 && inside != unit.len() {
                return Err(format!("deleted part of chain {unit:?}"));
            }
            covered += inside;
        }
        if covered != deleted.len() {
            return Err(format!("deleted tasks that may not go: {deleted:?} vs {:?}", self.units));
        }
        if deleted.len() > self.limit {
            return Err(format!("deleted {} tasks over limit {}", deleted.len(), self.limit));
        }
        let room = self.limit - deleted.len();
        match self.units.iter().find(|u| !deleted.contains(&u[0]) && u.len() <= room) {
            Some(unit) => Err(format!("left {unit:?} although {room} more fitted the limit")),
            None => Ok(()),
        }
    }
}

impl Model {
    /// `replay(request)`: locate, check (not final, replayed, completed), create (§8.3).
    pub(crate) fn replay(&mut self, request: &ReplayRequest) -> Result<Task, Fault> {
        let by_id = !request.execution_id.is_empty();
        if by_id != request.business_key.is_empty() {
            return Err(Fault::of(ErrorKind::InvalidInput).loose());
        }
        if let Some(priority) = request.priority {
            super::write::check_priority(priority)?;
        }
        let target = if by_id {
            self.entry(&request.execution_id)?
        } else {
            self.tail(&request.business_key).ok_or_else(Fault::not_found)?
        };
        let t = &target.task;
        if !t.status.is_terminal() {
            return Err(Fault::of(ErrorKind::ReplayNotFinal));
        }
        if self.replayed(&t.id) {
            return Err(Fault::of(ErrorKind::AlreadyReplayed));
        }
        if t.status == Status::Completed && !request.allow_completed {
            return Err(Fault::of(ErrorKind::CompletedNotAllowed));
        }
        let (name, order) = self.new_identity("")?;
        let task = Task {
            id: name.clone(),
            business_key: t.business_key.clone(),
            replay_of: t.id.clone(),
            task_type: t.task_type.clone(),
            queue: t.queue.clone(),
            payload: request.payload.clone().or_else(|| t.payload.clone()),
            status: Status::Pending,
            max_retry: t.max_retry,
            on_parent_failure: t.on_parent_failure,
            owner: t.owner.clone(),
            priority: request.priority.unwrap_or(t.priority),
            run_at: self.now,
            created_at: self.now,
            ..Task::default()
        };
        self.generated += 1;
        let entry = Entry {
            task: task.clone(),
            order,
            lease_until: Timestamp::ZERO,
            pending_parents: 0,
            edges: Vec::new(),
            tokens: Vec::new(),
        };
        self.tasks.insert(name, entry);
        Ok(task)
    }

    /// `resume(id)`: the same task runs again (§E5), its parents decided afresh and its edges
    /// re-armed.
    pub(crate) fn resume(&mut self, id: &str) -> Result<Task, Fault> {
        let entry = self.entry(id)?;
        match entry.task.status {
            Status::Failed | Status::Canceled if self.replayed(id) => {
                return Err(Fault::of(ErrorKind::AlreadyReplayed));
            }
            Status::Failed | Status::Canceled => {}
            _ => return Err(Fault::of(ErrorKind::NotResumable)),
        }
        let mut statuses = Vec::new();
        for parent in distinct(&entry.task.depends_on) {
            let status = self.status_of(&parent).ok_or(Fault::of(ErrorKind::NotResumable))?;
            statuses.push((parent, status));
        }
        let policy = entry.task.on_parent_failure;
        let decision = submit_decision(statuses.iter().map(|(p, s)| (p.as_str(), *s)), policy);
        if let SubmitDecision::Canceled { .. } = decision {
            return Err(Fault::of(ErrorKind::NotResumable));
        }
        let now = self.now;
        let entry = self.entry_mut(id)?;
        set_status(&mut entry.task, decision.status())?;
        let t = &mut entry.task;
        (t.attempts, t.lease_lost, t.throttled) = (0, 0, 0);
        t.cancel_requested = false;
        t.finished_at = None;
        t.resumes += 1;
        t.run_at = now;
        release(entry);
        entry.pending_parents = decision.pending_parents();
        entry.edges = statuses
            .into_iter()
            .map(|(parent, s)| Edge { parent, done: s.is_terminal() })
            .collect();
        Ok(entry.task.clone())
    }

    /// What `prune(request)` may delete (§E16 and docs/decisions.md "Retention").
    pub(crate) fn prune_plan(&self, request: &PruneRequest) -> Result<PrunePlan, Fault> {
        if request.statuses.iter().any(|s| !s.is_terminal()) {
            return Err(Fault::invalid("statuses"));
        }
        let protected: HashSet<&str> = self
            .tasks
            .values()
            .filter(|e| !e.task.status.is_terminal())
            .flat_map(|e| e.task.depends_on.iter().map(String::as_str))
            .collect();
        let eligible = |t: &Task| {
            t.status.is_terminal()
                && (request.statuses.is_empty() || request.statuses.contains(&t.status))
                && t.finished_at.is_some_and(|f| f < request.finished_before)
                && !protected.contains(t.id.as_str())
        };
        let rows = self.list(&taskgate::Filter::default());
        let mut units = Vec::new();
        let mut keys_seen = HashSet::new();
        for t in &rows {
            if t.business_key.is_empty() {
                // A key-less execution with its replays is a replay chain: it goes whole, like
                // a keyed chain, so no stored `replay_of` ever names a pruned (or reused) ID.
                if self.replay_chain_root(t) {
                    let chain = self.replay_chain(&rows, t);
                    if chain.iter().all(|r| eligible(r)) {
                        units.push(chain.iter().map(|r| r.id.clone()).collect());
                    }
                }
            } else if request.include_keyed && keys_seen.insert(t.business_key.clone()) {
                let chain: Vec<&Task> =
                    rows.iter().filter(|r| r.business_key == t.business_key).collect();
                if chain.iter().all(|r| eligible(r)) {
                    units.push(chain.iter().map(|r| r.id.clone()).collect());
                }
            }
        }
        Ok(PrunePlan { units, limit: request.limit })
    }

    /// True when key-less `t` starts a replay chain: it replays no stored key-less task.
    fn replay_chain_root(&self, t: &Task) -> bool {
        self.task(&t.replay_of).is_none_or(|target| !target.business_key.is_empty())
    }

    /// `root` and the executions replaying it, one after another (each execution is replayed
    /// at most once), in chain order.
    fn replay_chain<'a>(&self, rows: &'a [Task], root: &'a Task) -> Vec<&'a Task> {
        let mut chain = vec![root];
        let mut last = root;
        while let Some(next) = rows.iter().find(|r| r.replay_of == last.id) {
            chain.push(next);
            last = next;
        }
        chain
    }

    /// `prune(request)` with the model's own choice when the limit leaves one.
    pub(crate) fn prune(&mut self, request: &PruneRequest) -> Result<u64, Fault> {
        let chosen = self.prune_plan(request)?.greedy();
        self.delete(&chosen);
        Ok(u64::try_from(chosen.len()).unwrap_or(u64::MAX))
    }

    /// Deletes tasks and every edge that names them.
    pub(crate) fn delete(&mut self, names: &BTreeSet<String>) {
        self.tasks.retain(|name, _| !names.contains(name));
        for entry in self.tasks.values_mut() {
            entry.edges.retain(|e| !names.contains(&e.parent));
        }
    }
}
