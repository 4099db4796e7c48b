//! The state a runtime and its clients share: the broker, the clock, the validated config,
//! the handlers, the consumed queues, the running table and the shutdown signals.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use taskgate::{Broker, Clock, ErrorKind, FailKind, Failure, RetryAt};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::claim::QueueRt;
use crate::completer::Completer;
use crate::config::Resolved;
use crate::handler::Handler;
use crate::running::Running;
use crate::shutdown::{Ended, Tally};

/// Business-retry delay for claim-time attempts `n`.
pub(crate) type RetryDelay = Arc<dyn Fn(u32) -> Duration + Send + Sync>;

pub(crate) struct Inner {
    pub(crate) broker: Arc<dyn Broker>,
    /// The injected clock, else the system clock.
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) config: Resolved,
    pub(crate) handlers: HashMap<String, Handler>,
    /// The queues this process consumes.
    pub(crate) queues: HashMap<String, Arc<QueueRt>>,
    pub(crate) running: Running,
    /// Shutdown began: no more submits or claims.
    pub(crate) shutting_down: CancellationToken,
    /// The runtime was dropped without shutdown: every task stops where it is (a crash).
    pub(crate) kill: CancellationToken,
    /// Handlers still running after shutdown's stop timeout are dropped.
    pub(crate) abandon: CancellationToken,
    pub(crate) completer: Completer,
    pub(crate) retry_delay: RetryDelay,
    /// Bumped after every local final write, so local `wait`s return at once.
    pub(crate) finished_tx: watch::Sender<u64>,
    /// How the executions that ended once shutdown began ended (the shutdown report).
    pub(crate) tally: Tally,
}

impl Inner {
    /// Wakes local `wait`s: a task may have reached a final status.
    pub(crate) fn finished(&self) {
        self.finished_tx.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Counts `n` endings of kind `ended` for the shutdown report, once shutdown began.
    pub(crate) fn ended(&self, ended: Ended, n: usize) {
        if self.shutting_down.is_cancelled() {
            self.tally.add(ended, n);
        }
    }

    /// A retryable failure due `delay` from now. The broker adds the delay to its own clock
    /// inside the fail's transaction (the server's for PostgreSQL and MySQL), so a worker whose
    /// clock is off never shifts a retry.
    pub(crate) fn retry_failure(kind: FailKind, message: String, delay: Duration) -> Failure {
        Failure::new(kind, message, RetryAt::After(delay))
    }
}

/// Waits between attempts of a write that failed on storage (real time): a database that
/// fails over or a file briefly locked should not cost a finished result.
pub(crate) const STORAGE_RETRY_DELAYS: [Duration; 3] =
    [Duration::from_millis(100), Duration::from_millis(500), Duration::from_secs(2)];

/// Runs a final write; storage failures are retried after [`STORAGE_RETRY_DELAYS`], contract
/// errors return at once.
pub(crate) async fn write_with_retry<T, F, Fut>(what: &str, mut write: F) -> taskgate::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = taskgate::Result<T>>,
{
    let mut delays = STORAGE_RETRY_DELAYS.iter();
    loop {
        match write().await {
            Err(e) if e.is(ErrorKind::Backend) => {
                let Some(delay) = delays.next() else { return Err(e) };
                let error = crate::error::chain_text(&e);
                tracing::warn!(%error, retry_in_ms = delay.as_millis(), "{what} failed, retrying");
                tokio::time::sleep(*delay).await;
            }
            other => return other,
        }
    }
}

/// Runs `fut` until it finishes or `kill` fires (then it is dropped where it is).
pub(crate) async fn killable(kill: CancellationToken, fut: impl Future<Output = ()>) {
    tokio::select! {
        biased;
        () = kill.cancelled() => {}
        () = fut => {}
    }
}
