//! Metrics the runtime records, per queue (`metrics` facade: install a recorder before the
//! runtime starts, since handles are taken once per queue at start).

use metrics::{Counter, Histogram};

/// Counter and histogram names.
pub mod names {
    /// Tasks claimed.
    pub const CLAIMED: &str = "taskgate_worker_claimed_total";
    /// Tasks acked (counted when the ack is written).
    pub const COMPLETED: &str = "taskgate_worker_completed_total";
    /// Tasks whose failure was final (retries exhausted, a cap reached, skipped, no handler).
    pub const FAILED: &str = "taskgate_worker_failed_total";
    /// Failures that will be retried (business or throttled).
    pub const RETRIED: &str = "taskgate_worker_retried_total";
    /// Executions whose lease was lost (the reaper gave the task back; nothing was written).
    pub const LEASE_LOST: &str = "taskgate_worker_lease_lost_total";
    /// Executions finished as cancelled.
    pub const CANCELED: &str = "taskgate_worker_canceled_total";
    /// Executions returned to pending by shutdown.
    pub const REQUEUED: &str = "taskgate_worker_requeued_total";
    /// Steps saved by stepwise handlers.
    pub const STEPS: &str = "taskgate_worker_steps_total";
    /// Seconds from `run_at` to the claim.
    pub const QUEUE_LATENCY: &str = "taskgate_worker_queue_latency_seconds";
    /// Seconds the handler ran.
    pub const RUN_TIME: &str = "taskgate_worker_run_seconds";
}

/// One queue's metric handles.
#[derive(Clone, Debug)]
pub(crate) struct QueueMetrics {
    pub(crate) claimed: Counter,
    pub(crate) completed: Counter,
    pub(crate) failed: Counter,
    pub(crate) retried: Counter,
    pub(crate) lease_lost: Counter,
    pub(crate) canceled: Counter,
    pub(crate) requeued: Counter,
    pub(crate) steps: Counter,
    pub(crate) queue_latency: Histogram,
    pub(crate) run_time: Histogram,
}

impl QueueMetrics {
    pub(crate) fn new(queue: &str) -> Self {
        let q = queue.to_owned();
        QueueMetrics {
            claimed: metrics::counter!(names::CLAIMED, "queue" => q.clone()),
            completed: metrics::counter!(names::COMPLETED, "queue" => q.clone()),
            failed: metrics::counter!(names::FAILED, "queue" => q.clone()),
            retried: metrics::counter!(names::RETRIED, "queue" => q.clone()),
            lease_lost: metrics::counter!(names::LEASE_LOST, "queue" => q.clone()),
            canceled: metrics::counter!(names::CANCELED, "queue" => q.clone()),
            requeued: metrics::counter!(names::REQUEUED, "queue" => q.clone()),
            steps: metrics::counter!(names::STEPS, "queue" => q.clone()),
            queue_latency: metrics::histogram!(names::QUEUE_LATENCY, "queue" => q.clone()),
            run_time: metrics::histogram!(names::RUN_TIME, "queue" => q),
        }
    }
}
