//! The one error type every broker returns (extensions §E0): contract kinds as variants, storage
//! failures kept apart in [`Error::Backend`].

use std::fmt;

use crate::Status;

/// A boxed error usable as an [`Error::Backend`] source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Shorthand for `Result<T, taskgate::Error>`.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// The chain tail a business key already has, carried by [`Error::TaskExists`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ExistingTask {
    /// The key the enqueue tried to use.
    pub business_key: String,
    /// The key's latest execution (the chain tail) at the time of the check.
    pub execution_id: String,
    /// That execution's status.
    pub status: Status,
}

/// Everything a broker operation can fail with.
///
/// Contract kinds are variants callers match on (use [`Error::kind`] to compare kinds); storage
/// and network failures are always [`Error::Backend`] and never look like a contract kind, so a
/// transient database error is never mistaken for a lost lease.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The preset ID is taken, or the business key already has executions.
    #[error("{}", task_exists_message(id, existing.as_ref()))]
    TaskExists {
        /// The preset ID that already exists (empty when a business key collided).
        id: String,
        /// The key's chain tail when a business key collided.
        existing: Option<ExistingTask>,
    },
    /// No task with this ID (or no execution with this business key).
    #[error("task not found: {id}")]
    NotFound {
        /// The ID or key that was looked up.
        id: String,
    },
    /// The presented lease token does not hold the task's current lease.
    #[error("lease lost: task {id}")]
    LeaseLost {
        /// The task whose lease check failed.
        id: String,
    },
    /// A cancel was requested for this running task (heartbeat, save_step).
    #[error("task canceled: {id}")]
    Canceled {
        /// The task that is being cancelled.
        id: String,
    },
    /// Cancel of a task that is already terminal.
    #[error("task already in final state: task {id} (status={status})")]
    AlreadyFinal {
        /// The task.
        id: String,
        /// Its terminal status.
        status: Status,
    },
    /// Replay of an execution that has not finished.
    #[error("replay target not in final state: task {id} (status={status})")]
    ReplayNotFinal {
        /// The replay target.
        id: String,
        /// Its non-terminal status.
        status: Status,
    },
    /// The execution was already replayed (a chain must not fork).
    #[error("execution already replayed (chain must not fork): task {id}")]
    AlreadyReplayed {
        /// The replay or resume target.
        id: String,
    },
    /// Replay of a completed execution without `allow_completed`.
    #[error("replaying a completed execution requires allow_completed: task {id}")]
    CompletedNotAllowed {
        /// The replay target.
        id: String,
    },
    /// Operator resume of a task that cannot be resumed.
    #[error("task not resumable: task {id}: {reason}")]
    NotResumable {
        /// The task.
        id: String,
        /// Why it cannot be resumed.
        reason: String,
    },
    /// A caller-supplied value breaks a rule (extensions §E7); nothing was written.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The offending field or argument.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A method was called before `init`.
    #[error("broker is not initialized")]
    NotInitialized,
    /// A method was called after `close`.
    #[error("broker is closed")]
    Closed,
    /// A status write that the transition table forbids.
    #[error("illegal transition: {from} -> {to}")]
    IllegalTransition {
        /// The current status.
        from: Status,
        /// The requested status.
        to: Status,
    },
    /// The storage failed (I/O, driver, server); the operation did not take effect.
    ///
    /// Its message names the cause (`postgres backend error: <driver message>`), which also
    /// stays reachable as [`source`](std::error::Error::source) for callers that inspect it.
    #[error("{backend} backend error: {source}")]
    Backend {
        /// Which backend failed.
        backend: &'static str,
        /// The underlying driver error.
        #[source]
        source: BoxError,
    },
}

fn task_exists_message(id: &str, existing: Option<&ExistingTask>) -> String {
    match existing {
        Some(e) => format!(
            "business key {:?} already has executions (latest {} is {})",
            e.business_key, e.execution_id, e.status
        ),
        None if id.is_empty() => "task already exists".to_owned(),
        None => format!("task already exists: {id}"),
    }
}

/// The kind of an [`Error`], for comparing without the details.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// [`Error::TaskExists`].
    TaskExists,
    /// [`Error::NotFound`].
    NotFound,
    /// [`Error::LeaseLost`].
    LeaseLost,
    /// [`Error::Canceled`].
    Canceled,
    /// [`Error::AlreadyFinal`].
    AlreadyFinal,
    /// [`Error::ReplayNotFinal`].
    ReplayNotFinal,
    /// [`Error::AlreadyReplayed`].
    AlreadyReplayed,
    /// [`Error::CompletedNotAllowed`].
    CompletedNotAllowed,
    /// [`Error::NotResumable`].
    NotResumable,
    /// [`Error::InvalidInput`].
    InvalidInput,
    /// [`Error::NotInitialized`].
    NotInitialized,
    /// [`Error::Closed`].
    Closed,
    /// [`Error::IllegalTransition`].
    IllegalTransition,
    /// [`Error::Backend`].
    Backend,
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl Error {
    /// This error's kind.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::TaskExists { .. } => ErrorKind::TaskExists,
            Error::NotFound { .. } => ErrorKind::NotFound,
            Error::LeaseLost { .. } => ErrorKind::LeaseLost,
            Error::Canceled { .. } => ErrorKind::Canceled,
            Error::AlreadyFinal { .. } => ErrorKind::AlreadyFinal,
            Error::ReplayNotFinal { .. } => ErrorKind::ReplayNotFinal,
            Error::AlreadyReplayed { .. } => ErrorKind::AlreadyReplayed,
            Error::CompletedNotAllowed { .. } => ErrorKind::CompletedNotAllowed,
            Error::NotResumable { .. } => ErrorKind::NotResumable,
            Error::InvalidInput { .. } => ErrorKind::InvalidInput,
            Error::NotInitialized => ErrorKind::NotInitialized,
            Error::Closed => ErrorKind::Closed,
            Error::IllegalTransition { .. } => ErrorKind::IllegalTransition,
            Error::Backend { .. } => ErrorKind::Backend,
        }
    }

    /// An [`Error::InvalidInput`] for `field`.
    pub fn invalid(field: &'static str, reason: impl Into<String>) -> Self {
        Error::InvalidInput { field, reason: reason.into() }
    }

    /// An [`Error::Backend`] wrapping a driver error.
    pub fn backend(backend: &'static str, source: impl Into<BoxError>) -> Self {
        Error::Backend { backend, source: source.into() }
    }

    /// An [`Error::NotFound`] for `id`.
    pub fn not_found(id: impl Into<String>) -> Self {
        Error::NotFound { id: id.into() }
    }

    /// An [`Error::LeaseLost`] for `id`.
    pub fn lease_lost(id: impl Into<String>) -> Self {
        Error::LeaseLost { id: id.into() }
    }

    /// True when the error is of `kind`.
    pub fn is(&self, kind: ErrorKind) -> bool {
        self.kind() == kind
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn samples() -> Vec<Error> {
        vec![
            Error::TaskExists { id: "dup-id".into(), existing: None },
            Error::TaskExists {
                id: String::new(),
                existing: Some(ExistingTask {
                    business_key: "bk-dup".into(),
                    execution_id: "01J0000000000000000000000A".into(),
                    status: Status::Failed,
                }),
            },
            Error::not_found("ghost"),
            Error::lease_lost("st"),
            Error::Canceled { id: "rn".into() },
            Error::AlreadyFinal { id: "fin".into(), status: Status::Completed },
            Error::ReplayNotFinal { id: "e2".into(), status: Status::Pending },
            Error::AlreadyReplayed { id: "e1".into() },
            Error::CompletedNotAllowed { id: "e1".into() },
            Error::NotResumable { id: "c1".into(), reason: "task is completed".into() },
            Error::invalid("queue", "must not be empty"),
            Error::NotInitialized,
            Error::Closed,
            Error::IllegalTransition { from: Status::Completed, to: Status::Running },
            Error::backend("sqlite", std::io::Error::other("disk I/O error")),
        ]
    }

    #[test]
    fn messages_people_read() {
        let text: Vec<String> = samples().iter().map(|e| format!("{:?}: {e}", e.kind())).collect();
        insta::assert_snapshot!(text.join("\n"));
    }

    #[test]
    fn backend_message_names_its_cause_and_the_source_stays_reachable() {
        let e = Error::backend("postgres", std::io::Error::other("connection reset"));
        assert_eq!(e.to_string(), "postgres backend error: connection reset");
        let source = std::error::Error::source(&e).map(ToString::to_string);
        assert_eq!(source.as_deref(), Some("connection reset"));
    }

    #[test]
    fn only_backend_errors_have_a_source() {
        for e in samples() {
            let has_source = std::error::Error::source(&e).is_some();
            assert_eq!(has_source, e.kind() == ErrorKind::Backend, "{e:?}");
        }
    }
}

/// `url` with its password replaced by `***`, for error messages and logs
/// (`postgres://u:secret@h/db` → `postgres://u:***@h/db`; text without credentials is kept).
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else { return url.to_owned() };
    let Some((userinfo, host)) = rest.rsplit_once('@') else { return url.to_owned() };
    match userinfo.split_once(':') {
        Some((user, _)) => format!("{scheme}://{user}:***@{host}"),
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod redact_tests {
    use super::redact_url;

    #[test]
    fn passwords_are_hidden() {
        assert_eq!(redact_url("postgres://u:secret@h/db"), "postgres://u:***@h/db");
        assert_eq!(redact_url("mysql://root:pw@h:3306/db"), "mysql://root:***@h:3306/db");
        assert_eq!(redact_url("postgres://u@h/db"), "postgres://u@h/db");
        assert_eq!(redact_url("not a url"), "not a url");
    }
}
