//! Replay (contract §8.3) and operator resume (§E5): the two ways a finished execution runs
//! again — a new execution at the chain's tail, or the same task under the same ID.

use std::sync::Arc;

use taskgate::decide::{check_replay, check_resume, resume_decision};
use taskgate::{id, Error, ReplayRequest, Result, Status, Task};

use crate::state::{Edge, Entry};
use crate::txn::Txn;

impl Txn<'_> {
    /// Creates the new execution replaying the request's target and returns it.
    pub(crate) fn replay(&mut self, request: &ReplayRequest) -> Result<Task> {
        let target = self.replay_target(request)?;
        let replayed = self.state.replayed.contains(&target.key);
        check_replay(&target.task.id, target.task.status, replayed, request.allow_completed)?;
        let task = replay_of(&target.task, request, self.now);
        let key = target.key.clone();
        let entry = Entry {
            key: Arc::from(task.id.as_str()),
            slot: 0,
            task,
            lease: None,
            lease_until: 0,
            pending_parents: 0,
            parents: Vec::new(),
            children: Vec::new(),
        };
        let snapshot = entry.snapshot();
        self.state.replayed.insert(key);
        self.insert(entry);
        Ok(snapshot)
    }

    /// The target by ID, or the chain tail of the key.
    fn replay_target(&self, request: &ReplayRequest) -> Result<&Entry> {
        if request.execution_id.is_empty() {
            let key = &request.business_key;
            self.state.chain_tail(key).ok_or_else(|| Error::not_found(key))
        } else {
            self.entry(&request.execution_id)
        }
    }

    /// Runs a failed or cancelled task again under its ID (§E5) and returns its snapshot.
    pub(crate) fn resume(&mut self, id: &str) -> Result<Task> {
        let entry = self.entry(id)?;
        check_resume(id, entry.task.status, self.state.replayed.contains(id))?;
        let parents = self.resume_parents(entry)?;
        let policy = entry.task.on_parent_failure;
        let decision = resume_decision(id, parents.iter().map(|(p, s)| (&**p, *s)), policy)?;
        let (key, now) = (entry.key.clone(), self.now);
        let entry = self.move_task(id, decision.status(), now)?;
        reset_for_resume(entry);
        entry.pending_parents = decision.pending_parents();
        entry.parents = parents
            .iter()
            .map(|(p, s)| Edge { parent: p.clone(), done: s.is_terminal() })
            .collect();
        let snapshot = entry.snapshot();
        self.link_children(&key, &parents);
        self.note(id);
        Ok(snapshot)
    }

    /// The distinct parents and their statuses; a pruned parent makes the task not resumable.
    fn resume_parents(&self, entry: &Entry) -> Result<Vec<(Arc<str>, Status)>> {
        let parents = entry.task.distinct_parents().into_iter().map(|p| {
            let found = self.state.tasks.get(p).map(|e| (e.key.clone(), e.task.status));
            found.ok_or_else(|| Error::NotResumable {
                id: entry.task.id.clone(),
                reason: format!("parent {p} no longer exists"),
            })
        });
        parents.collect()
    }

    /// Makes sure every parent lists `child` (edges are re-armed on resume).
    fn link_children(&mut self, child: &Arc<str>, parents: &[(Arc<str>, Status)]) {
        for (parent, _) in parents {
            if let Some(p) = self.state.tasks.get_mut(parent) {
                p.link_child(child);
            }
        }
    }
}

/// The fields resume resets (decisions.md): counters, lease, cancel flag, finish time.
fn reset_for_resume(entry: &mut Entry) {
    entry.release_lease();
    let t = &mut entry.task;
    t.attempts = 0;
    t.lease_lost = 0;
    t.throttled = 0;
    t.cancel_requested = false;
    t.finished_at = None;
    t.resumes = t.resumes.saturating_add(1);
}

/// The new execution replaying `target` (contract §8.3 step 4, decisions.md).
fn replay_of(target: &Task, request: &ReplayRequest, now: taskgate::Timestamp) -> Task {
    Task {
        id: id::new_ulid(),
        business_key: target.business_key.clone(),
        replay_of: target.id.clone(),
        task_type: target.task_type.clone(),
        queue: target.queue.clone(),
        payload: request.payload.clone().or_else(|| target.payload.clone()),
        status: Status::Pending,
        max_retry: target.max_retry,
        on_parent_failure: target.on_parent_failure,
        owner: target.owner.clone(),
        priority: request.priority.unwrap_or(target.priority),
        run_at: now,
        created_at: now,
        ..Task::default()
    }
}
