//! Audited operator mutations (extensions §E13): the [`AdminAction`]s an admin tool performs
//! through [`Broker::audited`](crate::Broker::audited), the [`AuditRecord`] each one leaves in
//! the task storage, and the [`AuditQuery`] that reads them back.
//!
//! The rule a backend keeps (`brokertest` case `c51_audit_commits_with_mutation`): an action
//! that changes state writes its record in the same atomic unit as the change, so both commit
//! or neither does; an action the contract rejects (an unknown task, a finished task cancelled,
//! a completed task resumed) changes nothing and still writes exactly one record whose outcome
//! is the error's code; bad input ([`Error::InvalidInput`]) and storage failures write none.

use crate::{Error, ErrorKind, ReplayRequest, Task, Timestamp};

/// A mutation an operator performs through an admin tool.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminAction {
    /// [`Broker::cancel`](crate::Broker::cancel) of a task.
    Cancel {
        /// The task.
        id: String,
    },
    /// [`Broker::resume`](crate::Broker::resume) of a failed or cancelled task.
    Resume {
        /// The task.
        id: String,
    },
    /// [`Broker::replay`](crate::Broker::replay) of a finished execution.
    Replay(ReplayRequest),
    /// [`Broker::pause_queue`](crate::Broker::pause_queue).
    PauseQueue {
        /// The queue.
        queue: String,
    },
    /// [`Broker::resume_queue`](crate::Broker::resume_queue).
    ResumeQueue {
        /// The queue.
        queue: String,
    },
}

impl AdminAction {
    /// The action's name as recorded: `cancel`, `resume`, `replay`, `pause_queue`,
    /// `resume_queue`.
    pub fn name(&self) -> &'static str {
        match self {
            AdminAction::Cancel { .. } => "cancel",
            AdminAction::Resume { .. } => "resume",
            AdminAction::Replay(_) => "replay",
            AdminAction::PauseQueue { .. } => "pause_queue",
            AdminAction::ResumeQueue { .. } => "resume_queue",
        }
    }

    /// What the action is about, as recorded: `task:<id>`, `key:<business key>` (a replay by
    /// key) or `queue:<name>`.
    pub fn target(&self) -> String {
        match self {
            AdminAction::Cancel { id } | AdminAction::Resume { id } => format!("task:{id}"),
            AdminAction::Replay(r) if r.execution_id.is_empty() => {
                format!("key:{}", r.business_key)
            }
            AdminAction::Replay(r) => format!("task:{}", r.execution_id),
            AdminAction::PauseQueue { queue } | AdminAction::ResumeQueue { queue } => {
                format!("queue:{queue}")
            }
        }
    }
}

/// What a successful [`Broker::audited`](crate::Broker::audited) call returns.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AdminOutcome {
    /// The action took effect and returns nothing (cancel, pause, resume of a queue).
    Done,
    /// The action took effect and returns a task: the resumed task, or the replay's new
    /// execution.
    Task(Box<Task>),
}

/// One audit record: who did what to which task or queue, when, and how it ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AuditRecord {
    /// The record's ID (a ULID; later records of one process have greater IDs).
    pub id: String,
    /// When the action ran, on the broker's clock (the same clock as the task's times).
    pub at: Timestamp,
    /// Who acted (an admin token's name).
    pub actor: String,
    /// [`AdminAction::name`].
    pub action: String,
    /// [`AdminAction::target`].
    pub target: String,
    /// `ok`, or the code of the contract error that rejected the action
    /// ([`error_code`], e.g. `task.not_resumable`).
    pub outcome: String,
    /// The replay's new execution ID on success, else the error's message; empty otherwise.
    pub detail: String,
}

/// Which records [`Broker::audit_log`](crate::Broker::audit_log) returns, newest first
/// (`at` descending, then `id` descending). Empty fields do not filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AuditQuery {
    /// Only this actor's records.
    pub actor: String,
    /// Only this action's records ([`AdminAction::name`]).
    pub action: String,
    /// Only records about this target ([`AdminAction::target`]).
    pub target: String,
    /// At most this many records; zero means all.
    pub limit: usize,
    /// Skip this many records first.
    pub offset: usize,
}

impl AuditQuery {
    /// True when `record` passes every non-empty condition (limit and offset aside).
    pub fn matches(&self, record: &AuditRecord) -> bool {
        (self.actor.is_empty() || self.actor == record.actor)
            && (self.action.is_empty() || self.action == record.action)
            && (self.target.is_empty() || self.target == record.target)
    }
}

/// The outcome recorded for an error: the stable code of its kind (`task.not_found`,
/// `task.already_final`, `task.not_resumable`, …), as the admin API also answers it.
pub fn error_code(error: &Error) -> &'static str {
    match error.kind() {
        ErrorKind::TaskExists => "task.exists",
        ErrorKind::NotFound => "task.not_found",
        ErrorKind::LeaseLost => "task.lease_lost",
        ErrorKind::Canceled => "task.canceled",
        ErrorKind::AlreadyFinal => "task.already_final",
        ErrorKind::ReplayNotFinal => "task.replay_not_final",
        ErrorKind::AlreadyReplayed => "task.already_replayed",
        ErrorKind::CompletedNotAllowed => "task.completed_not_allowed",
        ErrorKind::NotResumable => "task.not_resumable",
        ErrorKind::InvalidInput => "input.invalid",
        ErrorKind::NotInitialized => "broker.not_initialized",
        ErrorKind::Closed => "broker.closed",
        ErrorKind::IllegalTransition => "task.illegal_transition",
        ErrorKind::Backend => "storage.unavailable",
    }
}

/// True when a rejected action still leaves a record: a contract error about the target's
/// state, not bad input (nothing was attempted) and not a storage or lifecycle failure
/// (nothing can be written).
pub fn records_rejection(error: &Error) -> bool {
    !matches!(
        error.kind(),
        ErrorKind::InvalidInput
            | ErrorKind::Backend
            | ErrorKind::NotInitialized
            | ErrorKind::Closed
    )
}

/// The record of `action` by `actor` at `at` that ended with `result`.
pub fn record_for(
    actor: &str,
    action: &AdminAction,
    at: Timestamp,
    result: Result<&AdminOutcome, &Error>,
) -> AuditRecord {
    let (outcome, detail) = match result {
        Ok(AdminOutcome::Task(task)) if matches!(action, AdminAction::Replay(_)) => {
            ("ok".to_owned(), task.id.clone())
        }
        Ok(_) => ("ok".to_owned(), String::new()),
        Err(e) => (error_code(e).to_owned(), e.to_string()),
    };
    AuditRecord {
        id: crate::id::new_ulid(),
        at,
        actor: actor.to_owned(),
        action: action.name().to_owned(),
        target: action.target(),
        outcome,
        detail,
    }
}

/// Checks the actor and the action's arguments before anything is attempted: an actor is 1 to
/// 255 bytes without control characters (a NUL included, contract §E7.3); ids and queues
/// follow the contract's name rules.
pub fn validate_action(
    actor: &str,
    action: &AdminAction,
    limits: &crate::Limits,
) -> crate::Result<()> {
    if actor.is_empty() || actor.len() > 255 {
        return Err(Error::invalid("actor", "must be 1 to 255 bytes"));
    }
    // The log is read by people: an actor cannot carry control characters (a NUL, a newline
    // that forges a second line, a terminal escape).
    if let Some(pos) = actor.chars().position(char::is_control) {
        return Err(Error::invalid("actor", format!("control character at position {pos}")));
    }
    match action {
        AdminAction::Cancel { id } | AdminAction::Resume { id } => crate::validate::validate_id(id),
        AdminAction::Replay(r) => crate::validate::validate_replay_request(r, limits),
        AdminAction::PauseQueue { queue } | AdminAction::ResumeQueue { queue } => {
            crate::validate::validate_queue(queue)
        }
    }
}
