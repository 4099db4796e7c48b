//! The model's writes that a producer or a worker makes: enqueue (contract §3.4, §5.1,
//! extensions §E8), claims (§3.4 "Dequeue", §E4 pause), and the token-checked calls (ack,
//! fail, cancel, finish_canceled, requeue, heartbeat, save_step — §3.3, §3.4, §4, §E3).

use std::collections::HashSet;

use taskgate::decide::submit_decision;
use taskgate::validate::{MAX_MESSAGE_CHARS, MAX_STEP_DELAY};
use taskgate::{AckItem, ErrorKind, FailKind, Failure, RetryAt, Status, Step, Task, Timestamp};

use super::call::{Detail, Fault, Outcome};
use super::state::{Edge, Entry, Model};

/// Checks a status write against the contract's transition table (`taskgate::transition`,
/// which the spec defines as the contract itself) and makes it.
pub(crate) fn set_status(task: &mut Task, to: Status) -> Result<(), Fault> {
    taskgate::transition(task.status, to).map_err(|_| Fault::of(ErrorKind::IllegalTransition))?;
    task.status = to;
    Ok(())
}

/// The distinct entries of `list` in first-occurrence order.
pub(crate) fn distinct(list: &[String]) -> Vec<String> {
    let mut seen = HashSet::new();
    list.iter().filter(|p| seen.insert(p.as_str())).cloned().collect()
}

/// A priority outside −100..=100 is `InvalidInput { field: "priority" }`, before anything else.
pub(crate) fn check_priority(priority: i16) -> Result<(), Fault> {
    if (taskgate::MIN_PRIORITY..=taskgate::MAX_PRIORITY).contains(&priority) {
        Ok(())
    } else {
        Err(Fault::invalid("priority"))
    }
}

impl Model {
    /// `enqueue`: key check, preset-ID check, parent check, submit decision, store (§3.4).
    pub(crate) fn enqueue(&mut self, input: &Task) -> Result<Task, Fault> {
        check_priority(input.priority)?;
        self.check_key(&input.business_key)?;
        let (name, order) = self.new_identity(&input.id)?;
        let parents = distinct(&input.depends_on);
        let mut statuses = Vec::new();
        for parent in &parents {
            statuses.push((parent.as_str(), self.status_of(parent).ok_or_else(Fault::not_found)?));
        }
        let decision = submit_decision(statuses.iter().copied(), input.on_parent_failure);
        let mut task = Task {
            id: name.clone(),
            status: decision.status(),
            lease_token: String::new(),
            lease_expires_at: None,
            last_heartbeat_at: None,
            created_at: self.now,
            cancel_requested: false,
            steps: 0,
            resumes: 0,
            ..input.clone()
        };
        if task.run_at.is_zero() {
            task.run_at = self.now;
        }
        if let taskgate::decide::SubmitDecision::Canceled { last_error } = &decision {
            task.last_error = last_error.clone();
            task.finished_at = Some(self.now);
        }
        let edges = statuses
            .iter()
            .map(|(p, s)| Edge { parent: (*p).to_owned(), done: s.is_terminal() })
            .collect();
        if input.id.is_empty() {
            self.generated += 1;
        }
        let entry = Entry {
            task: task.clone(),
            order,
            lease_until: Timestamp::ZERO,
            pending_parents: decision.pending_parents(),
            edges,
            tokens: Vec::new(),
        };
        self.tasks.insert(name, entry);
        Ok(task)
    }

    fn check_key(&self, key: &str) -> Result<(), Fault> {
        match (key.is_empty(), self.tail(key)) {
            (false, Some(tail)) => Err(Fault {
                kind: ErrorKind::TaskExists,
                detail: Detail::Existing {
                    key: key.to_owned(),
                    id: tail.task.id.clone(),
                    status: tail.task.status,
                },
            }),
            _ => Ok(()),
        }
    }

    /// The model name and sort key of a new task: the preset ID, or the next generated one.
    pub(crate) fn new_identity(&self, preset: &str) -> Result<(String, String), Fault> {
        if preset.is_empty() {
            return Ok((self.next_generated_name(), format!("0{:09}", self.generated + 1)));
        }
        if self.tasks.contains_key(preset) {
            return Err(Fault::of(ErrorKind::TaskExists));
        }
        Ok((preset.to_owned(), preset.to_owned()))
    }

    /// `enqueue_many`: the same rules task by task, all or nothing (§E8). Which item's error
    /// surfaces is the first failing one; its details are left open.
    pub(crate) fn enqueue_many(&mut self, tasks: &[Task]) -> Outcome {
        // Input is checked for the whole batch before any lookup (the front door).
        if let Err(fault) = tasks.iter().try_for_each(|t| check_priority(t.priority)) {
            return Outcome::Failed(fault.loose());
        }
        let mut scratch = self.clone();
        let mut stored = Vec::new();
        for task in tasks {
            match scratch.enqueue(task) {
                Ok(t) => stored.push(t),
                Err(fault) => return Outcome::Failed(fault.loose()),
            }
        }
        *self = scratch;
        Outcome::Tasks(stored)
    }

    fn claim(&mut self, queues: &[String], max: usize) -> Result<Vec<Task>, Fault> {
        if queues.is_empty() {
            return Err(Fault::invalid("queues"));
        }
        if max == 0 {
            return Err(Fault::invalid("max"));
        }
        let ready = self.ready(queues);
        ready.iter().take(max).map(|name| self.claim_one(name)).collect()
    }

    fn claim_one(&mut self, name: &str) -> Result<Task, Fault> {
        self.claims += 1;
        let token = format!("{name}#{}", self.claims);
        let now = self.now;
        let ttl = self.options.ttl(&self.entry(name)?.task.queue);
        let entry = self.entry_mut(name)?;
        set_status(&mut entry.task, Status::Running)?;
        entry.task.lease_token = token.clone();
        entry.task.started_at.get_or_insert(now);
        entry.lease_until = now.saturating_add(ttl);
        entry.task.lease_expires_at = Some(entry.lease_until);
        entry.task.last_heartbeat_at = None;
        entry.tokens.push(token);
        Ok(entry.task.clone())
    }

    /// `try_dequeue_many(queues, max)`.
    pub(crate) fn try_dequeue_many(&mut self, queues: &[String], max: usize) -> Outcome {
        self.claim(queues, max).map_or_else(Outcome::Failed, Outcome::Tasks)
    }

    /// `try_dequeue(queues)`.
    pub(crate) fn try_dequeue(&mut self, queues: &[String]) -> Outcome {
        match self.claim(queues, 1) {
            Ok(mut tasks) => Outcome::MaybeTask(tasks.pop()),
            Err(fault) => Outcome::Failed(fault),
        }
    }

    /// The blocking `dequeue(queues)`: a ready task at once, else it waits.
    pub(crate) fn dequeue(&mut self, queues: &[String]) -> Outcome {
        match self.claim(queues, 1) {
            Ok(mut tasks) => tasks.pop().map_or(Outcome::Blocks, Outcome::Task),
            Err(fault) => Outcome::Failed(fault),
        }
    }

    /// The token check (§3.3): missing ⇒ NotFound; not running, empty or other token ⇒
    /// LeaseLost.
    pub(crate) fn leased(&self, id: &str, token: &str) -> Result<(), Fault> {
        let task = &self.entry(id)?.task;
        if task.status != Status::Running || token.is_empty() || token != task.lease_token {
            return Err(Fault::lease_lost());
        }
        Ok(())
    }

    /// `ack(id, token, result)`: completed, then propagation.
    pub(crate) fn ack(
        &mut self,
        id: &str,
        token: &str,
        result: &Option<Vec<u8>>,
    ) -> Result<(), Fault> {
        self.leased(id, token)?;
        self.entry_mut(id)?.task.result = result.clone();
        self.finish(id, Status::Completed, None)
    }

    /// `ack_many(items)`: each item on its own, in order, in one unit.
    pub(crate) fn ack_many(&mut self, items: &[AckItem]) -> Vec<Result<(), Fault>> {
        items.iter().map(|i| self.ack(&i.id, &i.token, &i.result)).collect()
    }

    /// `fail(id, token, failure)` (§4.1).
    pub(crate) fn fail(&mut self, id: &str, token: &str, failure: &Failure) -> Result<(), Fault> {
        self.leased(id, token)?;
        let throttled_max = self.options.throttled_max;
        let task = &mut self.entry_mut(id)?.task;
        task.last_error = failure.message.clone();
        let retry = match failure.kind {
            FailKind::Business => {
                task.attempts += 1;
                task.attempts <= task.max_retry
            }
            FailKind::Throttled => {
                task.throttled += 1;
                if task.throttled >= throttled_max {
                    task.last_error = format!("throttled {} times", task.throttled);
                }
                task.throttled < throttled_max
            }
            FailKind::Skip => false,
        };
        if !retry {
            return self.finish(id, Status::Failed, None);
        }
        let now = self.now;
        let entry = self.entry_mut(id)?;
        set_status(&mut entry.task, Status::Retrying)?;
        entry.task.run_at = match failure.retry {
            RetryAt::Now => now,
            RetryAt::At(at) if at.is_zero() => now,
            RetryAt::At(at) => at,
            RetryAt::After(delay) => now.saturating_add(delay),
        };
        release(entry);
        Ok(())
    }

    /// `cancel(id)`: terminal ⇒ AlreadyFinal; running ⇒ only the request flag; else canceled.
    pub(crate) fn cancel(&mut self, id: &str) -> Result<(), Fault> {
        let entry = self.entry_mut(id)?;
        match entry.task.status {
            s if s.is_terminal() => Err(Fault::of(ErrorKind::AlreadyFinal)),
            Status::Running => {
                entry.task.cancel_requested = true;
                Ok(())
            }
            _ => self.finish(id, Status::Canceled, Some("canceled".to_owned())),
        }
    }

    /// `finish_canceled(id, token)`.
    pub(crate) fn finish_canceled(&mut self, id: &str, token: &str) -> Result<(), Fault> {
        self.leased(id, token)?;
        self.finish(id, Status::Canceled, Some("canceled".to_owned()))
    }

    /// `requeue(id, token)`: back to pending, no counter and no `run_at` change.
    pub(crate) fn requeue(&mut self, id: &str, token: &str) -> Result<(), Fault> {
        self.leased(id, token)?;
        let entry = self.entry_mut(id)?;
        set_status(&mut entry.task, Status::Pending)?;
        release(entry);
        entry.task.cancel_requested = false;
        Ok(())
    }

    /// `heartbeat(id, token)`: renews, then reports a cancel request.
    pub(crate) fn heartbeat(&mut self, id: &str, token: &str) -> Result<(), Fault> {
        self.leased(id, token)?;
        let now = self.now;
        let ttl = self.options.ttl(&self.entry(id)?.task.queue);
        let entry = self.entry_mut(id)?;
        entry.lease_until = now.saturating_add(ttl);
        entry.task.lease_expires_at = Some(entry.lease_until);
        entry.task.last_heartbeat_at = Some(now);
        if entry.task.cancel_requested {
            return Err(Fault::of(ErrorKind::Canceled));
        }
        Ok(())
    }

    /// `save_step(id, token, step)` (§E3): input first, then the token, then the checkpoint;
    /// a cancel request turns it into a cancel.
    pub(crate) fn save_step(&mut self, id: &str, token: &str, step: &Step) -> Result<(), Fault> {
        check_step(step)?;
        self.leased(id, token)?;
        let now = self.now;
        let entry = self.entry_mut(id)?;
        entry.task.cursor = step.cursor.clone();
        entry.task.progress = step.progress;
        entry.task.message = step.message.clone();
        entry.task.steps += 1;
        if entry.task.cancel_requested {
            self.finish(id, Status::Canceled, Some("canceled".to_owned()))?;
            return Err(Fault::of(ErrorKind::Canceled));
        }
        entry.task.attempts = 0;
        set_status(&mut entry.task, Status::Pending)?;
        release(entry);
        entry.task.run_at = now.saturating_add(step.delay);
        Ok(())
    }
}

fn check_step(step: &Step) -> Result<(), Fault> {
    if step.delay > MAX_STEP_DELAY {
        return Err(Fault::invalid("delay"));
    }
    if step.progress.is_some_and(|p| p > 100) {
        return Err(Fault::invalid("progress"));
    }
    if step.message.chars().count() > MAX_MESSAGE_CHARS {
        return Err(Fault::invalid("message"));
    }
    Ok(())
}

/// Clears the lease: no token, no deadline, no heartbeat.
pub(crate) fn release(entry: &mut Entry) {
    entry.task.lease_token.clear();
    entry.task.lease_expires_at = None;
    entry.task.last_heartbeat_at = None;
    entry.lease_until = Timestamp::ZERO;
}
