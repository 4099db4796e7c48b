//! The executions running in this process (runtime spec §12.4 step 2): each one's
//! cancellation token and the flags that decide its final write, reachable by task ID so a
//! local cancel or a shutdown can reach the handler at once.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio_util::sync::CancellationToken;

/// The user (here or in another process) cancelled the task.
pub(crate) const USER_CANCELLED: u8 = 1;
/// The lease is gone (the reaper owns the task): write nothing.
pub(crate) const LEASE_LOST: u8 = 2;
/// Shutdown's grace period ran out while the handler ran.
pub(crate) const INTERRUPTED: u8 = 4;
/// The handler already released the task itself (`save_step`): write nothing more.
pub(crate) const RELEASED: u8 = 8;

/// One running execution's shared state.
#[derive(Debug, Default)]
pub(crate) struct Exec {
    /// Cancelled when the handler should stop (user cancel, lease lost, shutdown).
    pub(crate) cancel: CancellationToken,
    flags: AtomicU8,
}

impl Exec {
    /// Sets `flag`, and cancels the handler's token when `cancel` is true.
    pub(crate) fn mark(&self, flag: u8, cancel: bool) {
        self.flags.fetch_or(flag, Ordering::SeqCst);
        if cancel {
            self.cancel.cancel();
        }
    }

    /// Clears `flag`.
    pub(crate) fn unmark(&self, flag: u8) {
        self.flags.fetch_and(!flag, Ordering::SeqCst);
    }

    /// True when `flag` is set.
    pub(crate) fn has(&self, flag: u8) -> bool {
        self.flags.load(Ordering::SeqCst) & flag != 0
    }

    /// True when this process may still write for the task (neither lost nor released).
    pub(crate) fn holds_lease(&self) -> bool {
        !self.has(LEASE_LOST | RELEASED)
    }
}

/// The table of running executions, by task ID. An ID may have several: a handler whose
/// lease was lost unnoticed (manual heartbeats) still runs when the task runs again.
#[derive(Debug, Default)]
pub(crate) struct Running {
    map: Mutex<HashMap<String, Vec<Arc<Exec>>>>,
    interrupting: AtomicBool,
}

impl Running {
    fn map(&self) -> MutexGuard<'_, HashMap<String, Vec<Arc<Exec>>>> {
        // Every update is one insert or remove: a poisoned map is still consistent.
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a new execution of `id`; interrupted at once when shutdown already timed out.
    pub(crate) fn register(&self, id: &str) -> Arc<Exec> {
        let exec = Arc::new(Exec::default());
        if self.interrupting.load(Ordering::SeqCst) {
            exec.mark(INTERRUPTED, true);
        }
        self.map().entry(id.to_owned()).or_default().push(exec.clone());
        exec
    }

    /// Removes `exec`, one execution of `id`.
    pub(crate) fn remove(&self, id: &str, exec: &Arc<Exec>) {
        let mut map = self.map();
        if let Some(list) = map.get_mut(id) {
            list.retain(|e| !Arc::ptr_eq(e, exec));
            if list.is_empty() {
                map.remove(id);
            }
        }
    }

    /// The executions of `id` running here.
    pub(crate) fn get(&self, id: &str) -> Vec<Arc<Exec>> {
        self.map().get(id).cloned().unwrap_or_default()
    }

    /// Interrupts every running execution and every later one; returns how many ran.
    pub(crate) fn interrupt_all(&self) -> usize {
        self.interrupting.store(true, Ordering::SeqCst);
        let map = self.map();
        map.values().flatten().map(|exec| exec.mark(INTERRUPTED, true)).count()
    }

    /// How many executions run here.
    pub(crate) fn len(&self) -> usize {
        self.map().values().map(Vec::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_id_may_run_twice_and_interrupts_reach_both() {
        let running = Running::default();
        let stale = running.register("t1");
        let fresh = running.register("t1");
        assert_eq!((running.len(), running.get("t1").len()), (2, 2));
        assert_eq!(running.interrupt_all(), 2);
        assert!(stale.has(INTERRUPTED) && fresh.cancel.is_cancelled());
        let late = running.register("t2");
        assert!(late.has(INTERRUPTED), "registered after the interrupt: interrupted at once");
        running.remove("t1", &stale);
        assert_eq!(running.get("t1").len(), 1);
        running.remove("t1", &fresh);
        assert!(running.get("t1").is_empty());
        assert!(late.holds_lease());
        late.mark(RELEASED, false);
        assert!(!late.holds_lease());
        late.unmark(RELEASED);
        late.mark(LEASE_LOST, false);
        assert!(!late.holds_lease());
    }
}
