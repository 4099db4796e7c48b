//! The CLI's typed errors: each names the problem in words an operator can act on, and maps
//! to an exit code (1: the request was wrong or refused; 2: the database could not be used).

use std::process::ExitCode;

use crate::backends::SCHEMES;

/// What every verb returns: its exit code when it ran, or the error that stopped it.
pub(crate) type Outcome = Result<ExitCode, CliError>;

/// Exit code of a request that was wrong or refused (bad input, unknown task, a conflict).
pub(crate) const EXIT_REFUSED: u8 = 1;
/// Exit code of a database that could not be reached or used.
pub(crate) const EXIT_DATABASE: u8 = 2;
/// Exit code after Ctrl-C (128 + SIGINT).
pub(crate) const EXIT_INTERRUPTED: u8 = 130;

/// Why a verb stopped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum CliError {
    /// Neither `--url` nor `TASKGATE_URL` was given.
    #[error("no database URL: pass --url or set TASKGATE_URL (supported: {SCHEMES})")]
    NoUrl,
    /// The URL's scheme names no backend.
    #[error("unsupported scheme {scheme:?} in {url:?}; supported: {SCHEMES}")]
    UnknownScheme {
        /// The scheme as written.
        scheme: String,
        /// The whole URL (password hidden).
        url: String,
    },
    /// The URL names a backend but cannot be used.
    #[error("bad URL {url:?}: {reason}")]
    BadUrl {
        /// The URL (password hidden).
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A SQLite file that does not exist, for a verb that does not create one.
    #[error("no SQLite database at {path}: run `taskgate migrate --url {url}` to create one")]
    NoDatabaseFile {
        /// The file's path.
        path: String,
        /// The URL given.
        url: String,
    },
    /// The database has no taskgate tables under the prefix.
    #[error("no taskgate schema with prefix {prefix:?} at {url}: run `taskgate migrate` to create it (or pass --prefix)")]
    NoSchema {
        /// The URL (password hidden).
        url: String,
        /// The table prefix.
        prefix: String,
    },
    /// The schema is older than this taskgate.
    #[error("the schema with prefix {prefix:?} is at version {current}, this taskgate needs version {latest}: run `taskgate migrate`")]
    SchemaBehind {
        /// The table prefix.
        prefix: String,
        /// The newest applied version.
        current: i64,
        /// The newest version this taskgate knows.
        latest: i64,
    },
    /// The schema is newer than this taskgate.
    #[error("the schema with prefix {prefix:?} is at version {current}, newer than this taskgate knows ({latest}): upgrade taskgate")]
    SchemaAhead {
        /// The table prefix.
        prefix: String,
        /// The newest applied version.
        current: i64,
        /// The newest version this taskgate knows.
        latest: i64,
    },
    /// No task (or no execution of a business key) by that name.
    #[error("unknown task {id:?}: no task with this ID (or business key)")]
    UnknownTask {
        /// The ID or key looked up.
        id: String,
    },
    /// An argument breaks a rule; nothing was written.
    #[error("invalid {field}: {reason}")]
    InvalidInput {
        /// The argument.
        field: String,
        /// What is wrong with it.
        reason: String,
    },
    /// `check --filter` selected no case.
    #[error("--filter {filter:?} matched no case (`taskgate check --list` prints their names)")]
    NoCaseMatched {
        /// The filter text.
        filter: String,
    },
    /// The broker refused the request (already final, not resumable, …); nothing changed.
    #[error("refused: {0}{hint}", hint = hint(.0))]
    Refused(taskgate::Error),
    /// The database could not be reached.
    #[error("cannot reach the database at {url}: {cause}")]
    Unreachable {
        /// The URL (password hidden).
        url: String,
        /// The driver's cause.
        cause: String,
    },
    /// The database failed a request.
    #[error("database error: {0}")]
    Storage(taskgate::Error),
}

impl CliError {
    /// The process exit code for this error.
    pub(crate) fn exit_code(&self) -> ExitCode {
        ExitCode::from(match self {
            CliError::Unreachable { .. } | CliError::Storage(_) => EXIT_DATABASE,
            _ => EXIT_REFUSED,
        })
    }

    /// A stable name for the error, for `--json` readers.
    pub(crate) fn code(&self) -> &'static str {
        match self {
            CliError::NoUrl => "no_url",
            CliError::UnknownScheme { .. } => "unknown_scheme",
            CliError::BadUrl { .. } => "bad_url",
            CliError::NoDatabaseFile { .. } => "no_database_file",
            CliError::NoSchema { .. } => "no_schema",
            CliError::SchemaBehind { .. } => "schema_behind",
            CliError::SchemaAhead { .. } => "schema_ahead",
            CliError::UnknownTask { .. } => "unknown_task",
            CliError::InvalidInput { .. } => "invalid_input",
            CliError::NoCaseMatched { .. } => "no_case_matched",
            CliError::Refused(_) => "refused",
            CliError::Unreachable { .. } => "unreachable",
            CliError::Storage(_) => "storage",
        }
    }

    /// A bad argument the CLI itself found.
    pub(crate) fn invalid(field: &str, reason: impl Into<String>) -> CliError {
        CliError::InvalidInput { field: field.to_owned(), reason: reason.into() }
    }
}

impl From<taskgate::Error> for CliError {
    /// The broker's error, by kind: an unknown ID, bad input, a storage failure, or a refusal.
    fn from(e: taskgate::Error) -> CliError {
        match e {
            taskgate::Error::NotFound { id } => CliError::UnknownTask { id },
            taskgate::Error::InvalidInput { field, reason } => {
                CliError::InvalidInput { field: field.to_owned(), reason }
            }
            e @ taskgate::Error::Backend { .. } => CliError::Storage(e),
            e => CliError::Refused(e),
        }
    }
}

/// What the operator can do about a refusal, where the CLI has a flag for it.
fn hint(e: &taskgate::Error) -> &'static str {
    match e {
        taskgate::Error::CompletedNotAllowed { .. } => " (pass --allow-completed)",
        taskgate::Error::AlreadyReplayed { .. } => {
            " (replay the chain's latest execution: --key BUSINESS_KEY, or its ID)"
        }
        _ => "",
    }
}

/// `url` with its password replaced by `***`.
pub(crate) fn redact(url: &str) -> String {
    taskgate::redact_url(url)
}
