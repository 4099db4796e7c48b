//! The state a runtime and its clients share: the broker, the clock, the validated config,
//! the consumed queues, the running table and the stop signals.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use taskgate::{Broker, Clock};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::completer::Completer;
use crate::config::Resolved;
use crate::queue::QueueRt;
use crate::running::Running;
use crate::shutdown::{Ended, Tally};

/// Business-retry delay for claim-time attempts `n`.
pub(crate) type RetryDelay = Arc<dyn Fn(u32) -> Duration + Send + Sync>;

pub(crate) struct Inner {
    pub(crate) broker: Arc<dyn Broker>,
    /// The injected clock, else the system clock.
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: Resolved,
    /// The queues this process consumes.
    pub(crate) queues: HashMap<String, Arc<QueueRt>>,
    pub(crate) running: Running,
    pub(crate) stops: Stops,
    pub(crate) completer: Completer,
    pub(crate) retry_delay: RetryDelay,
    /// Bumped after every local final write, so local `wait`s return at once.
    pub(crate) finished_tx: watch::Sender<u64>,
    /// How the executions that ended once shutdown began ended (the shutdown report).
    pub(crate) tally: Tally,
}

/// What stops what, as a tree of cancellation tokens (a parent's cancel reaches its
/// children, never the other way):
///
/// ```text
/// kill                 the runtime was dropped without shutdown (a crash): everything below,
/// │                    and every task spawned on it, stops where it is
/// ├── shutting_down    shutdown began: no more submits, claims, reaps or periodic ticks
/// ├── abandon          handlers still running after shutdown's stop timeout are dropped
/// └── flush            the completer flushes what it was handed and stops
/// ```
///
/// A graceful shutdown cancels the three children in turn (`Runtime::shutdown`); a crash
/// cancels `kill` alone.
pub(crate) struct Stops {
    pub(crate) kill: CancellationToken,
    pub(crate) shutting_down: CancellationToken,
    pub(crate) abandon: CancellationToken,
    pub(crate) flush: CancellationToken,
}

impl Stops {
    pub(crate) fn new() -> Stops {
        let kill = CancellationToken::new();
        Stops {
            shutting_down: kill.child_token(),
            abandon: kill.child_token(),
            flush: kill.child_token(),
            kill,
        }
    }
}

impl Inner {
    /// Wakes local `wait`s: a task may have reached a final status.
    pub(crate) fn finished(&self) {
        self.finished_tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Counts `n` endings of kind `ended` for the shutdown report, once shutdown began.
    pub(crate) fn ended(&self, ended: Ended, n: usize) {
        if self.stops.shutting_down.is_cancelled() {
            self.tally.add(ended, n);
        }
    }
}
