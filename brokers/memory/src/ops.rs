//! The writes on one existing task (contract §3.4, §E3): ack, fail, cancel, finish_canceled,
//! requeue, heartbeat and save_step — each checks first and writes only when every check passed.

use taskgate::decide::{fail_outcome, texts};
use taskgate::validate::{validate_ack_item, Limits};
use taskgate::{AckItem, Error, Failure, Result, Status, Step};

use crate::txn::{close_out, Txn};

/// Each item's argument check for [`Txn::ack_many`] ([`validate_ack_item`]).
pub(crate) fn check_ack_items(items: &[AckItem], limits: &Limits) -> Vec<Result<()>> {
    items.iter().map(|item| validate_ack_item(item, limits)).collect()
}

impl Txn<'_> {
    /// Completes a running task with `result` and propagates.
    pub(crate) fn ack(&mut self, id: &str, token: &str, result: Option<Vec<u8>>) -> Result<()> {
        let now = self.now;
        let entry = self.leased_move(id, token, Status::Completed)?;
        entry.task.result = result;
        let has_children = close_out(entry, now, None);
        self.note(id);
        self.propagate_if(id, Status::Completed, has_children)
    }

    /// Acks each item on its own: a bad item fails only itself. `checks` holds each item's
    /// argument check ([`check_ack_items`], run before the lock is taken); an item that failed
    /// it keeps that error and is not acked. The outcomes are written over the checks (no
    /// second vector under the lock).
    pub(crate) fn ack_many(
        &mut self,
        items: &[AckItem],
        mut checks: Vec<Result<()>>,
    ) -> Vec<Result<()>> {
        for (item, outcome) in items.iter().zip(checks.iter_mut()) {
            if outcome.is_ok() {
                *outcome = self.ack(&item.id, &item.token, item.result.clone());
            }
        }
        checks
    }

    /// Records a failure: `retrying` at its retry time, or `failed` with propagation (§4.1).
    pub(crate) fn fail(&mut self, id: &str, token: &str, failure: &Failure) -> Result<()> {
        let (now, throttled_max) = (self.now, self.opts.throttled_max);
        let entry = self.leased(id, token)?;
        let t = &entry.task;
        let out = fail_outcome(t.attempts, t.max_retry, t.throttled, throttled_max, failure, now);
        entry.task.attempts = out.attempts;
        entry.task.throttled = out.throttled;
        entry.task.last_error = out.last_error;
        match out.run_at {
            Some(run_at) if out.status == Status::Retrying => {
                self.release(id, Status::Retrying, run_at)
            }
            _ => self.finish(id, Status::Failed, None),
        }
    }

    /// Cancels at once unless running (then only flags it); terminal is `AlreadyFinal`.
    pub(crate) fn cancel(&mut self, id: &str) -> Result<()> {
        let entry = self.entry_mut(id)?;
        match entry.task.status {
            status if status.is_terminal() => {
                Err(Error::AlreadyFinal { id: id.to_owned(), status })
            }
            Status::Running => {
                entry.task.cancel_requested = true;
                Ok(())
            }
            _ => self.finish(id, Status::Canceled, Some(texts::CANCELED.to_owned())),
        }
    }

    /// The worker's final write for a cancelled task.
    pub(crate) fn finish_canceled(&mut self, id: &str, token: &str) -> Result<()> {
        self.leased(id, token)?;
        self.finish(id, Status::Canceled, Some(texts::CANCELED.to_owned()))
    }

    /// Back to `pending` with every counter and `run_at` unchanged.
    pub(crate) fn requeue(&mut self, id: &str, token: &str) -> Result<()> {
        let entry = self.leased(id, token)?;
        entry.task.cancel_requested = false;
        let run_at = entry.task.run_at;
        self.release(id, Status::Pending, run_at)
    }

    /// Renews the lease; then `Canceled` when a cancel was requested.
    pub(crate) fn heartbeat(&mut self, id: &str, token: &str) -> Result<()> {
        let (now, opts) = (self.now, self.opts);
        let entry = self.leased(id, token)?;
        entry.lease_until = now.saturating_add(opts.ttl(&entry.task.queue)).as_millis();
        entry.task.last_heartbeat_at = Some(now);
        if entry.task.cancel_requested {
            return Err(Error::Canceled { id: id.to_owned() });
        }
        Ok(())
    }

    /// Stores the checkpoint and releases the task to run again after `step.delay` (§E3); with
    /// a cancel requested, cancels it instead and returns `Canceled`.
    pub(crate) fn save_step(&mut self, id: &str, token: &str, step: Step) -> Result<()> {
        let now = self.now;
        let entry = self.leased(id, token)?;
        entry.task.cursor = step.cursor;
        entry.task.progress = step.progress;
        entry.task.message = step.message;
        entry.task.steps = entry.task.steps.saturating_add(1);
        if entry.task.cancel_requested {
            self.finish(id, Status::Canceled, Some(texts::CANCELED.to_owned()))?;
            return Err(Error::Canceled { id: id.to_owned() });
        }
        entry.task.attempts = 0;
        self.release(id, Status::Pending, now.saturating_add(step.delay))
    }
}
