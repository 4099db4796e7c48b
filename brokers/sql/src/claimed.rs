//! [`ClaimGuard`]: claimed tasks in transit from the claim's transaction to the caller. A caller
//! that went away before they arrived gets them requeued (extensions §E0).

use std::sync::Arc;

use taskgate::{ResolvedOptions, Task};
use tokio::sync::OwnedRwLockReadGuard;

use crate::core::Core;
use crate::ops::claim;

/// Claimed tasks in transit to the caller; dropped undelivered, it requeues them.
pub(crate) struct ClaimGuard {
    core: Arc<Core>,
    opts: Arc<ResolvedOptions>,
    tasks: Vec<Task>,
    inflight: Option<OwnedRwLockReadGuard<()>>,
}

impl ClaimGuard {
    /// Tasks claimed for one caller, holding off `close` until delivered or requeued.
    pub(crate) fn new(
        core: Arc<Core>,
        opts: Arc<ResolvedOptions>,
        tasks: Vec<Task>,
        inflight: OwnedRwLockReadGuard<()>,
    ) -> ClaimGuard {
        ClaimGuard { core, opts, tasks, inflight: Some(inflight) }
    }

    /// The tasks, delivered: nothing is requeued any more.
    pub(crate) fn take(mut self) -> Vec<Task> {
        self.inflight = None;
        std::mem::take(&mut self.tasks)
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let tasks = std::mem::take(&mut self.tasks);
        if tasks.is_empty() {
            return;
        }
        let (core, opts) = (self.core.clone(), self.opts.clone());
        let inflight = self.inflight.take();
        let requeue = async move {
            let unclaim = core.tx(&opts, "unclaim");
            let _ = unclaim.run(&tasks[..], |tx, tasks| Box::pin(claim::unclaim(tx, tasks))).await;
            drop(inflight);
        };
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(requeue);
        }
    }
}
