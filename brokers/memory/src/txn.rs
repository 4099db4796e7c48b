//! The store every handle shares and its atomic units: one critical section under the mutex
//! ([`Txn`]), with the wake-up and the Notify snapshots it collected released only after the
//! lock is dropped (contract §3.3, §3.5).

use std::sync::{Arc, Mutex, MutexGuard};

use taskgate::wake::WakeHub;
use taskgate::{transition, Error, ResolvedOptions, Result, Status, Timestamp};

use crate::state::{Entry, Index, State};
use crate::NAME;

/// One in-memory storage: the state under a mutex and the in-process wake-up every handle on
/// it shares.
#[derive(Debug, Default)]
pub(crate) struct Store {
    state: Mutex<State>,
    /// Bumped after every write that can make a task claimable.
    pub(crate) hub: WakeHub,
}

impl Store {
    /// Locks the state. A panic inside an earlier critical section poisons it for good.
    pub(crate) fn lock(&self) -> Result<MutexGuard<'_, State>> {
        self.state
            .lock()
            .map_err(|_| Error::backend(NAME, "store poisoned by a panic in an earlier call"))
    }

    /// Runs `f` as one atomic unit, then wakes waiters and publishes the snapshots `f`
    /// collected — both after the lock is released.
    pub(crate) fn write<R>(
        &self,
        opts: &ResolvedOptions,
        f: impl FnOnce(&mut Txn<'_>) -> R,
    ) -> Result<R> {
        let mut guard = self.lock()?;
        let mut txn = Txn {
            now: opts.clock.now_ms(),
            opts,
            notes: opts.notifier.is_active().then(Vec::new),
            wake: false,
            state: &mut guard,
        };
        let out = f(&mut txn);
        let (notes, wake) = (txn.notes.take(), txn.wake);
        drop(guard);
        if wake {
            self.hub.wake();
        }
        if let Some(notes) = notes {
            opts.notifier.publish(notes);
        }
        Ok(out)
    }
}

/// One critical section: the locked state, its `now`, and what to publish afterwards.
pub(crate) struct Txn<'a> {
    /// The locked state.
    pub(crate) state: &'a mut State,
    /// The clock's time at the start of the unit, floored to ms.
    pub(crate) now: Timestamp,
    /// The calling handle's options.
    pub(crate) opts: &'a ResolvedOptions,
    /// Notify snapshots, when an observer is installed.
    pub(crate) notes: Option<Vec<taskgate::Task>>,
    /// A task became claimable (or a queue resumed): wake waiters afterwards.
    wake: bool,
}

impl Txn<'_> {
    /// The entry of `id`, or `NotFound`.
    pub(crate) fn entry(&self, id: &str) -> Result<&Entry> {
        self.state.tasks.get(id).ok_or_else(|| Error::not_found(id))
    }

    /// The entry of `id` for writing, or `NotFound`.
    pub(crate) fn entry_mut(&mut self, id: &str) -> Result<&mut Entry> {
        self.state.tasks.get_mut(id).ok_or_else(|| Error::not_found(id))
    }

    /// The lease-token check (contract §3.3): missing ⇒ `NotFound`; not running, empty token
    /// or another token ⇒ `LeaseLost`.
    pub(crate) fn leased(&mut self, id: &str, token: &str) -> Result<&mut Entry> {
        let entry =
            self.state.tasks.get_leased_mut(id, token).ok_or_else(|| Error::not_found(id))?;
        check_lease(entry, id, token)?;
        Ok(entry)
    }

    /// The lease-token check and a move to `to` (keeping `run_at`) with one lookup.
    pub(crate) fn leased_move(&mut self, id: &str, token: &str, to: Status) -> Result<&mut Entry> {
        let entry =
            self.state.tasks.get_leased_mut(id, token).ok_or_else(|| Error::not_found(id))?;
        check_lease(entry, id, token)?;
        let run_at = entry.task.run_at;
        shift(&mut self.state.index, entry, to, run_at, &mut self.wake)?;
        Ok(entry)
    }

    /// Moves a task to status `to` and `run_at` (see [`shift`]).
    pub(crate) fn move_task(
        &mut self,
        id: &str,
        to: Status,
        run_at: Timestamp,
    ) -> Result<&mut Entry> {
        let entry = self.state.tasks.get_mut(id).ok_or_else(|| Error::not_found(id))?;
        shift(&mut self.state.index, entry, to, run_at, &mut self.wake)?;
        Ok(entry)
    }

    /// [`Txn::move_task`] keeping `run_at`.
    pub(crate) fn move_status(&mut self, id: &str, to: Status) -> Result<&mut Entry> {
        let entry = self.state.tasks.get_mut(id).ok_or_else(|| Error::not_found(id))?;
        let run_at = entry.task.run_at;
        shift(&mut self.state.index, entry, to, run_at, &mut self.wake)?;
        Ok(entry)
    }

    /// Moves `id` to the non-terminal status `to` and releases its lease (requeue, retry,
    /// reap to pending, save_step).
    pub(crate) fn release(&mut self, id: &str, to: Status, run_at: Timestamp) -> Result<()> {
        let entry = self.move_task(id, to, run_at)?;
        entry.release_lease();
        self.note(id);
        Ok(())
    }

    /// Moves `id` to the terminal status `to` and writes the terminal fields ([`close_out`]);
    /// notes the snapshot. True when the task has children. No propagation: see
    /// [`Txn::finish`].
    pub(crate) fn finalize(
        &mut self,
        id: &str,
        to: Status,
        last_error: Option<String>,
    ) -> Result<bool> {
        let now = self.now;
        let has_children = close_out(self.move_status(id, to)?, now, last_error);
        self.note(id);
        Ok(has_children)
    }

    /// [`Txn::finalize`] and then propagation to the whole affected subtree (contract §5.3).
    pub(crate) fn finish(
        &mut self,
        id: &str,
        to: Status,
        last_error: Option<String>,
    ) -> Result<()> {
        let has_children = self.finalize(id, to, last_error)?;
        self.propagate_if(id, to, has_children)
    }

    /// Propagates from `id`, which reached `to`, when it has children.
    pub(crate) fn propagate_if(&mut self, id: &str, to: Status, has_children: bool) -> Result<()> {
        if has_children {
            self.propagate(id, to)?;
        }
        Ok(())
    }

    /// Records a deep copy of `id`'s current state for Notify.
    pub(crate) fn note(&mut self, id: &str) {
        if let Some(notes) = self.notes.as_mut() {
            if let Some(entry) = self.state.tasks.get(id) {
                notes.push(entry.snapshot());
            }
        }
    }

    /// Asks for a wake-up after the unit (a queue was resumed).
    pub(crate) fn wake_waiters(&mut self) {
        self.wake = true;
    }

    /// Inserts a new entry, indexes it and notes its snapshot.
    pub(crate) fn insert(&mut self, entry: Entry) {
        let key: Arc<str> = entry.key.clone();
        if self.state.insert(entry) {
            self.wake = true;
        }
        self.note(&key);
    }
}

/// The one place a task changes status or `run_at`: checks the transition table, then moves
/// the task between indexes; sets `wake` when it became claimable.
fn shift(
    index: &mut Index,
    entry: &mut Entry,
    to: Status,
    run_at: Timestamp,
    wake: &mut bool,
) -> Result<()> {
    transition(entry.task.status, to)?;
    index.remove(&entry.key, entry.slot, &entry.task);
    entry.task.status = to;
    entry.task.run_at = run_at;
    if index.add(&entry.key, entry.slot, &entry.task) {
        *wake = true;
    }
    Ok(())
}

/// The lease-token check on a found entry (contract §3.3).
fn check_lease(entry: &Entry, id: &str, token: &str) -> Result<()> {
    if entry.task.status != Status::Running || token.is_empty() || !entry.holds_lease(token) {
        return Err(Error::lease_lost(id));
    }
    Ok(())
}

/// The terminal fields: `finished_at`, no lease, no cancel request, `last_error` when given.
/// True when the task has children to propagate to.
pub(crate) fn close_out(entry: &mut Entry, now: Timestamp, last_error: Option<String>) -> bool {
    entry.release_lease();
    entry.task.cancel_requested = false;
    entry.task.finished_at = Some(now);
    if let Some(text) = last_error {
        entry.task.last_error = text;
    }
    !entry.children.is_empty()
}
