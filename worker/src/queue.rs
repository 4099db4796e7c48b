//! One consumed queue's runtime state: its settings, worker slots, gates (rate bucket, quota),
//! the flags its stats show, its metric handles and its claim-ahead buffer.

use std::sync::atomic::{AtomicBool, AtomicUsize};
use std::sync::Arc;

use taskgate::QuotaGate;
use tokio::sync::Semaphore;

use crate::ahead::buffer::Ahead;
use crate::bucket::TokenBucket;
use crate::config::QueueSettings;
use crate::obs::QueueMetrics;

/// One consumed queue's runtime state.
pub(crate) struct QueueRt {
    pub(crate) name: String,
    pub(crate) settings: QueueSettings,
    /// One permit per worker: held while a handler (or a worker's run of held tasks) runs.
    pub(crate) slots: Arc<Semaphore>,
    /// Handler starts per second, when the queue has a rate.
    pub(crate) bucket: Option<TokenBucket>,
    /// The quota gate, when the queue has a quota.
    pub(crate) quota: Option<Arc<dyn QuotaGate>>,
    /// The last quota reservation found the window exhausted.
    pub(crate) exhausted: AtomicBool,
    /// The last quota reservation failed (the storage is down): claims are stopped.
    pub(crate) stalled: AtomicBool,
    /// Handlers running now.
    pub(crate) active: AtomicUsize,
    pub(crate) metrics: QueueMetrics,
    /// Tasks claimed ahead (queues without a rate or quota gate).
    pub(crate) ahead: Ahead,
}

impl QueueRt {
    pub(crate) fn new(
        name: String,
        settings: QueueSettings,
        quota: Option<Arc<dyn QuotaGate>>,
    ) -> QueueRt {
        let bucket = (settings.rps > 0.0).then(|| TokenBucket::new(settings.rps, settings.burst));
        let slots = Arc::new(Semaphore::new(settings.workers));
        QueueRt {
            ahead: Ahead::new(slots.clone(), settings.workers, settings.prefetch),
            slots,
            metrics: QueueMetrics::new(&name),
            name,
            settings,
            bucket,
            quota,
            exhausted: AtomicBool::new(false),
            stalled: AtomicBool::new(false),
            active: AtomicUsize::new(0),
        }
    }

    /// True when a rate or quota gate counts this queue's handler starts: it claims only for
    /// free workers, never ahead.
    pub(crate) fn gated(&self) -> bool {
        self.bucket.is_some() || self.quota.is_some()
    }
}
