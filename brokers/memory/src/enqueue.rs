//! Enqueue and enqueue_many (contract §3.4 "Enqueue", §E8): every task of a batch is checked
//! and decided first, then all are stored — so a failing item stores nothing.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use taskgate::decide::{submit_decision, SubmitDecision};
use taskgate::{id, Error, ExistingTask, Result, Status, Task, Timestamp};

use crate::state::{Edge, Entry};
use crate::txn::Txn;

/// What earlier items of the same batch will have stored.
#[derive(Default)]
struct Batch {
    /// ID → decided status.
    ids: HashMap<Arc<str>, Status>,
    /// Business keys used.
    keys: HashSet<String>,
}

impl Txn<'_> {
    /// Checks and decides every task, then stores them all; returns the stored snapshots.
    pub(crate) fn enqueue_batch(&mut self, tasks: &[Task]) -> Result<Vec<Task>> {
        let mut batch = Batch::default();
        let planned: Vec<Entry> =
            tasks.iter().map(|t| self.plan(t, &mut batch)).collect::<Result<_>>()?;
        let mut stored = Vec::with_capacity(planned.len());
        for entry in planned {
            stored.push(entry.task.clone());
            self.insert(entry);
        }
        Ok(stored)
    }

    /// Runs the checks of contract §3.4 in order and builds the entry to store.
    fn plan(&self, task: &Task, batch: &mut Batch) -> Result<Entry> {
        self.check_key(&task.business_key, batch)?;
        let key = self.new_id(&task.id, batch)?;
        let parents = self.parents(task, batch)?;
        let decision = submit_decision(
            parents.iter().map(|(id, status)| (&**id, *status)),
            task.on_parent_failure,
        );
        let edges = parents
            .iter()
            .map(|(p, s)| Edge { parent: p.clone(), done: s.is_terminal() })
            .collect();
        let entry = Entry {
            task: self.stored_task(task, &key, &decision),
            key,
            slot: 0,
            lease: None,
            lease_until: 0,
            pending_parents: decision.pending_parents(),
            parents: edges,
            children: Vec::new(),
        };
        batch.ids.insert(entry.key.clone(), entry.task.status);
        if !task.business_key.is_empty() {
            batch.keys.insert(task.business_key.clone());
        }
        Ok(entry)
    }

    /// A key that already has executions (stored, or earlier in the batch) is `TaskExists`.
    fn check_key(&self, key: &str, batch: &Batch) -> Result<()> {
        if key.is_empty() {
            return Ok(());
        }
        if let Some(tail) = self.state.chain_tail(key) {
            let existing = ExistingTask {
                business_key: key.to_owned(),
                execution_id: tail.task.id.clone(),
                status: tail.task.status,
            };
            return Err(Error::TaskExists { id: String::new(), existing: Some(existing) });
        }
        if batch.keys.contains(key) {
            return Err(Error::TaskExists { id: String::new(), existing: None });
        }
        Ok(())
    }

    /// The preset ID when it is free, else a generated ULID.
    fn new_id(&self, preset: &str, batch: &Batch) -> Result<Arc<str>> {
        if preset.is_empty() {
            return Ok(Arc::from(id::new_ulid()));
        }
        if self.state.tasks.contains_key(preset) || batch.ids.contains_key(preset) {
            return Err(Error::TaskExists { id: preset.to_owned(), existing: None });
        }
        Ok(Arc::from(preset))
    }

    /// The distinct parents in `depends_on` order with their statuses; a missing one is
    /// `NotFound` naming it.
    fn parents(&self, task: &Task, batch: &Batch) -> Result<Vec<(Arc<str>, Status)>> {
        let mut out: Vec<(Arc<str>, Status)> = Vec::new();
        for parent in task.distinct_parents() {
            let found = match self.state.tasks.get(parent) {
                Some(entry) => Some((entry.key.clone(), entry.task.status)),
                None => batch.ids.get_key_value(parent).map(|(k, s)| (k.clone(), *s)),
            };
            out.push(found.ok_or_else(|| Error::not_found(parent))?);
        }
        Ok(out)
    }

    /// The record to store: broker-owned fields overwritten, times defaulted (decisions.md).
    fn stored_task(&self, input: &Task, key: &Arc<str>, decision: &SubmitDecision) -> Task {
        let mut task = input.clone();
        task.id = key.to_string();
        task.status = decision.status();
        task.lease_token.clear();
        task.lease_expires_at = None;
        task.last_heartbeat_at = None;
        task.created_at = self.now;
        if task.run_at.is_zero() {
            task.run_at = self.now;
        }
        task.started_at = task.started_at.filter(|t| !t.is_zero());
        task.finished_at = task.finished_at.filter(|t: &Timestamp| !t.is_zero());
        task.cancel_requested = false;
        task.steps = 0;
        task.resumes = 0;
        if let SubmitDecision::Canceled { last_error } = decision {
            task.last_error = last_error.clone();
            task.finished_at = Some(self.now);
        }
        task
    }
}
