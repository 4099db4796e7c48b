//! `taskgate`: the operator's command line. Verbs that look at and act on a queue's tasks
//! (`list`, `get`, `cancel`, `resume`, `replay`, `pause`, `unpause`, `stats`, `prune`,
//! `audit`, `migrate`), `check`, which runs the whole contract suite against a backend, and
//! `serve`, the admin HTTP API. `cancel`, `resume`, `replay`, `pause` and `unpause` go through
//! `Broker::audited`, as the admin API's do: each writes one audit record naming `--actor`
//! (default `cli:<OS user>`).
//!
//! Every verb is one variant of [`Command`] and one `async fn(args, &Context) -> Outcome`;
//! adding a verb is adding both and one line in [`Command::run`].

mod backends;
mod check;
mod error;
mod open;
mod output;
mod verbs;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

use error::{Outcome, EXIT_DATABASE, EXIT_REFUSED};
use output::Format;
use verbs::{audit, migrate, prune, queues, serve, tasks};

/// taskgate: a durable task broker with one behavioural contract.
#[derive(Debug, Parser)]
#[command(
    name = "taskgate",
    version,
    about,
    after_help = "Every verb takes the database as --url URL or TASKGATE_URL: memory://, \
                  sqlite://PATH, postgres://…, mysql://… or mariadb://….\n\
                  Exit codes: 0 done; 1 bad input, unknown task, a refused request or a failed \
                  check; 2 database unreachable or failing; 130 interrupted."
)]
struct Cli {
    /// Print one JSON document instead of tables and sentences.
    #[arg(long, global = true)]
    json: bool,
    #[command(flatten)]
    db: open::Db,
    /// Who the audit log names for cancel, resume, replay, pause and unpause (default
    /// `cli:<OS user>`).
    #[arg(long, env = "TASKGATE_ACTOR", value_name = "NAME", global = true)]
    actor: Option<String>,
    #[command(subcommand)]
    command: Command,
}

/// What every verb gets besides its own arguments: the database and the output format.
#[derive(Debug)]
pub(crate) struct Context {
    /// The database (`--url`/`TASKGATE_URL`, `--prefix`), before anything is opened.
    pub(crate) db: open::Db,
    /// Tables or JSON.
    pub(crate) format: Format,
    /// Who operator actions are recorded as in the audit log.
    pub(crate) actor: String,
}

/// The audit log's name for this CLI's user: `--actor`/`TASKGATE_ACTOR`, else `cli:` and the
/// OS user (`USER`, else `LOGNAME`, else `unknown`).
fn actor(given: Option<String>) -> String {
    given.unwrap_or_else(|| {
        let user = std::env::var("USER")
            .or_else(|_| std::env::var("LOGNAME"))
            .ok()
            .filter(|u| !u.is_empty())
            .unwrap_or_else(|| "unknown".to_owned());
        format!("cli:{user}")
    })
}

#[derive(Debug, Subcommand)]
enum Command {
    /// List tasks in creation order, filtered by queue, type, status, business key or owner.
    List(tasks::ListArgs),
    /// Show every field of one task.
    Get(tasks::IdArgs),
    /// Cancel a task (a running one is asked to stop and finishes as canceled).
    Cancel(tasks::IdArgs),
    /// Run a failed or canceled task again under its own ID.
    Resume(tasks::IdArgs),
    /// Run a finished execution again as a new execution.
    Replay(tasks::ReplayArgs),
    /// Stop claims from queues.
    Pause(queues::QueueArgs),
    /// Let claims from paused queues resume.
    Unpause(queues::QueueArgs),
    /// Tasks by type and status, paused queues and queue lengths.
    Stats(queues::StatsArgs),
    /// Delete old finished tasks.
    Prune(prune::PruneArgs),
    /// The audit log of operator actions, newest first.
    Audit(audit::AuditArgs),
    /// Apply the schema's missing migrations (or show its version with --status).
    Migrate(migrate::MigrateArgs),
    /// Run the contract suite against a backend and print one line per case as it finishes.
    Check(check::CheckArgs),
    /// Serve the admin HTTP API (`/api/v1`, bearer tokens, audited mutations) until Ctrl-C.
    Serve(serve::ServeArgs),
}

impl Command {
    async fn run(self, ctx: &Context) -> Outcome {
        match self {
            Command::List(args) => tasks::list(args, ctx).await,
            Command::Get(args) => tasks::get(args, ctx).await,
            Command::Cancel(args) => tasks::cancel(args, ctx).await,
            Command::Resume(args) => tasks::resume(args, ctx).await,
            Command::Replay(args) => tasks::replay(args, ctx).await,
            Command::Pause(args) => queues::pause(args, ctx).await,
            Command::Unpause(args) => queues::unpause(args, ctx).await,
            Command::Stats(args) => queues::stats(args, ctx).await,
            Command::Prune(args) => prune::prune(args, ctx).await,
            Command::Audit(args) => audit::audit(args, ctx).await,
            Command::Migrate(args) => migrate::migrate(args, ctx).await,
            Command::Check(args) => check::run(args, ctx).await,
            Command::Serve(args) => serve::serve(args, ctx).await,
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            // Help and version are not errors; a usage error is bad input (exit 1, not clap's 2,
            // which this CLI keeps for an unreachable database).
            return ExitCode::from(if e.use_stderr() { EXIT_REFUSED } else { 0 });
        }
    };
    let format = if cli.json { Format::Json } else { Format::Human };
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            output::err(&format!("taskgate: cannot start the async runtime: {e}"));
            return ExitCode::from(EXIT_DATABASE);
        }
    };
    let ctx = Context { db: cli.db, format, actor: actor(cli.actor) };
    match runtime.block_on(cli.command.run(&ctx)) {
        Ok(code) => code,
        Err(e) => {
            output::err(&format!("taskgate: {e}"));
            if format == Format::Json {
                let error =
                    serde_json::json!({ "error": { "code": e.code(), "message": e.to_string() } });
                output::out(&error.to_string());
            }
            e.exit_code()
        }
    }
}
