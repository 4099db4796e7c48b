//! The runtime's errors: [`Error`] for what a runtime or client call fails with, and
//! [`JobError`] for what a handler returns (how its failure is retried, runtime spec §12.4).

use std::fmt;
use std::time::Duration;

use taskgate::{BoxError, Status};

/// Shorthand for `Result<T, taskgate_worker::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What a runtime, client or handler-context call fails with.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The broker failed; the contract kind is in the source (`taskgate::Error::kind`).
    #[error("broker: {0}")]
    Broker(#[from] taskgate::Error),
    /// The configuration breaks a rule; nothing was started.
    #[error("invalid config: {field}: {reason}")]
    Config {
        /// The offending setting, as a path (`queues.email.workers`).
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The runtime was shut down: no more submits, replays or runs.
    #[error("runtime is shut down")]
    Shutdown,
    /// [`Client::wait`](crate::Client::wait) on a task that failed or was cancelled.
    #[error("task {id} {status}: {last_error}")]
    TaskFailed {
        /// The task.
        id: String,
        /// `failed` or `canceled`.
        status: Status,
        /// Its last error.
        last_error: String,
    },
    /// A payload or result did not encode or decode as the job's type.
    #[error("{what} of {kind}: {source}")]
    Payload {
        /// `payload` or `result`.
        what: &'static str,
        /// The job kind.
        kind: String,
        /// The serde error.
        source: serde_json::Error,
    },
    /// A queue this process neither configures nor can route to the default queue.
    #[error("unknown queue {0:?} (not configured and no default queue)")]
    UnknownQueue(String),
    /// The handler's lease or task no longer belongs to it (a context call after the final
    /// write or after [`JobContext::save_step`](crate::JobContext::save_step)).
    #[error("task {0} is no longer held by this handler")]
    NotHeld(String),
}

impl Error {
    /// The broker error's kind, when this is a broker error.
    pub fn broker_kind(&self) -> Option<taskgate::ErrorKind> {
        match self {
            Error::Broker(e) => Some(e.kind()),
            _ => None,
        }
    }

    pub(crate) fn config(field: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Config { field: field.into(), reason: reason.into() }
    }
}

/// How a handler's failure is retried (runtime spec §12.4 step 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureKind {
    /// A business failure: consumes one retry (`attempts`), retried after the back-off curve.
    Retry,
    /// The downstream pushed back: retried after `retry_after`, counts `throttled` only.
    Throttled {
        /// How long to wait before the next attempt.
        retry_after: Duration,
    },
    /// Final at once: the task fails without retrying (dead letter, replayable).
    Skip,
}

/// What a handler returns when it fails. Any `std::error::Error` converts into a retryable
/// business failure with `?`; [`JobError::throttled`] and [`JobError::skip`] say otherwise.
///
/// ```
/// use std::time::Duration;
/// use taskgate_worker::{FailureKind, JobError};
///
/// let e: JobError = std::io::Error::other("smtp down").into();
/// assert_eq!((e.kind(), e.to_string()), (FailureKind::Retry, "smtp down".to_owned()));
/// let slow = JobError::throttled(Duration::from_secs(3));
/// assert_eq!(slow.to_string(), "throttled, retry after 3s");
/// // Skip wraps anything, a throttle included, and wins: the task fails at once.
/// let dead = JobError::skip(slow);
/// assert_eq!((dead.kind(), dead.to_string()),
///            (FailureKind::Skip, "skip retry: throttled, retry after 3s".to_owned()));
/// ```
pub struct JobError {
    kind: FailureKind,
    message: String,
}

impl JobError {
    /// A retryable business failure with this message.
    pub fn msg(message: impl fmt::Display) -> Self {
        JobError { kind: FailureKind::Retry, message: message.to_string() }
    }

    /// A retryable business failure from an error (its sources appended).
    pub fn retry(error: impl Into<BoxError>) -> Self {
        let error: BoxError = error.into();
        JobError { kind: FailureKind::Retry, message: chain_text(&*error) }
    }

    /// The downstream is throttling: retry after `retry_after` without consuming a retry.
    pub fn throttled(retry_after: Duration) -> Self {
        JobError {
            kind: FailureKind::Throttled { retry_after },
            message: format!("throttled, retry after {}", crate::duration::format(retry_after)),
        }
    }

    /// Like [`JobError::throttled`], saying why.
    pub fn throttled_because(retry_after: Duration, why: impl fmt::Display) -> Self {
        let mut e = JobError::throttled(retry_after);
        e.message = format!("{}: {why}", e.message);
        e
    }

    /// Fails the task at once without retrying, whatever `inner` is (a throttle included).
    pub fn skip(inner: impl Into<JobError>) -> Self {
        let inner = inner.into();
        JobError { kind: FailureKind::Skip, message: format!("skip retry: {}", inner.message) }
    }

    /// How the failure is retried.
    pub fn kind(&self) -> FailureKind {
        self.kind
    }

    /// The text stored as the task's `last_error`.
    pub fn message(&self) -> &str {
        &self.message
    }

    pub(crate) fn panic(what: &str) -> Self {
        JobError::msg(format!("handler panic: {what}"))
    }
}

impl<E: Into<BoxError>> From<E> for JobError {
    fn from(error: E) -> Self {
        JobError::retry(error)
    }
}

impl fmt::Display for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

impl fmt::Debug for JobError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JobError")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .finish()
    }
}

/// An error's text followed by its sources, `": "`-separated.
pub(crate) fn chain_text(error: &(dyn std::error::Error + 'static)) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}
