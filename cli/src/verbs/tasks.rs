//! The task verbs: `list`, `get`, `cancel`, `resume`, `replay` (the last three audited, as
//! [`Context::actor`](crate::Context)). `--json` prints the admin API's task view: `get` as
//! `GET /api/v1/tasks/{id}` answers, `list` as its list elements, the mutations as its
//! mutations answer.

use std::process::ExitCode;
use std::str::FromStr;

use clap::Args;
use serde_json::json;
use taskgate::{AdminAction, AdminOutcome, Filter, ReplayRequest, Status, Task, Timestamp};
use taskgate_admin::TaskView;

use crate::error::{CliError, Outcome};
use crate::output::{clip, emit, heartbeat_age, status_label, table, task_block, to_json};
use crate::Context;

/// Arguments of `taskgate list`.
#[derive(Debug, Args)]
pub(crate) struct ListArgs {
    /// Only tasks in this queue.
    #[arg(long)]
    queue: Option<String>,
    /// Only tasks of this type.
    #[arg(long = "type", value_name = "TYPE")]
    task_type: Option<String>,
    /// Only tasks in this status: blocked, pending, running, retrying, completed, failed or
    /// canceled.
    #[arg(long)]
    status: Option<String>,
    /// Only the executions of this business key (in chain order).
    #[arg(long = "key", value_name = "BUSINESS_KEY")]
    business_key: Option<String>,
    /// Only tasks submitted by this owner.
    #[arg(long)]
    owner: Option<String>,
    /// At most this many tasks (0: all).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Skip this many tasks first (paging).
    #[arg(long, default_value_t = 0)]
    offset: usize,
}

/// `taskgate list`: tasks in creation order, filtered.
pub(crate) async fn list(args: ListArgs, ctx: &Context) -> Outcome {
    let status = args.status.as_deref().map(parse_status).transpose()?;
    let filter = Filter {
        task_type: args.task_type.unwrap_or_default(),
        queue: args.queue.unwrap_or_default(),
        status,
        business_key: args.business_key.unwrap_or_default(),
        owner: args.owner.unwrap_or_default(),
        parent: String::new(),
        limit: args.limit,
        offset: args.offset,
    };
    let broker = ctx.db.open().await?;
    let tasks = broker.list(&filter).await?;
    let now = broker.now().await?;
    let json = json!({
        "tasks": tasks.iter().map(|t| TaskView::at(t, now)).collect::<Vec<_>>(),
        "limit": filter.limit,
        "offset": filter.offset,
    });
    emit(ctx.format, &list_table(&tasks, &filter, now), &json);
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}

/// A status filter, typed: an unknown name is an error that lists the valid ones.
fn parse_status(text: &str) -> Result<Status, CliError> {
    Status::from_str(text).map_err(|_| {
        let names: Vec<&str> = Status::ALL.iter().map(|s| s.as_str()).collect();
        CliError::invalid(
            "--status",
            format!("unknown status {text:?}; one of {}", names.join(", ")),
        )
    })
}

fn list_table(tasks: &[Task], filter: &Filter, now: Timestamp) -> String {
    let rows: Vec<Vec<String>> = tasks
        .iter()
        .map(|t| {
            vec![
                t.id.clone(),
                t.task_type.clone(),
                t.queue.clone(),
                status_label(t, now),
                heartbeat_age(t, now),
                t.attempts.to_string(),
                t.created_at.to_string(),
                clip(&t.last_error, 40),
            ]
        })
        .collect();
    let header =
        ["ID", "TYPE", "QUEUE", "STATUS", "HEARTBEAT", "ATTEMPTS", "CREATED", "LAST ERROR"];
    let mut out = if tasks.is_empty() { String::new() } else { table(&header, &rows) };
    let more = filter.limit > 0 && tasks.len() == filter.limit;
    let next = filter.offset + tasks.len();
    out.push_str(&match (tasks.len(), more) {
        (0, _) => "no tasks\n".to_owned(),
        (1, _) => "1 task\n".to_owned(),
        (n, false) => format!("{n} tasks\n"),
        (n, true) => format!("{n} tasks (more may follow: --offset {next})\n"),
    });
    out
}

/// Arguments of the verbs that take one task ID.
#[derive(Debug, Args)]
pub(crate) struct IdArgs {
    /// The task's ID.
    id: String,
}

/// `taskgate get ID`: every field of one task.
pub(crate) async fn get(args: IdArgs, ctx: &Context) -> Outcome {
    taskgate::validate::validate_id(&args.id)?;
    let broker = ctx.db.open().await?;
    let task = broker.get(&args.id).await?;
    let now = broker.now().await?;
    let view = TaskView::detail(&*broker, &task, None).await?;
    emit(ctx.format, &task_block(&task, now), &to_json(&view));
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}

/// `taskgate cancel ID`: cancels a task at once, or asks its worker to stop when it runs.
pub(crate) async fn cancel(args: IdArgs, ctx: &Context) -> Outcome {
    taskgate::validate::validate_id(&args.id)?;
    let broker = ctx.db.open().await?;
    let cancel = AdminAction::Cancel { id: args.id.clone() };
    broker.audited(&ctx.actor, &cancel).await?;
    let task = broker.get(&args.id).await?;
    let human = match task.cancel_requested {
        true => format!(
            "cancel requested for {}: it is running; its worker stops it and finishes it as \
             canceled\n",
            task.id
        ),
        false => format!("canceled {}\n", task.id),
    };
    emit(ctx.format, &human, &to_json(&TaskView::from(&task)));
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}

/// `taskgate resume ID`: runs a failed or canceled task again under its own ID.
pub(crate) async fn resume(args: IdArgs, ctx: &Context) -> Outcome {
    taskgate::validate::validate_id(&args.id)?;
    let broker = ctx.db.open().await?;
    let task = acted_on(broker.audited(&ctx.actor, &AdminAction::Resume { id: args.id }).await?)?;
    let human = format!("resumed {}: now {} (resumes: {})\n", task.id, task.status, task.resumes);
    emit(ctx.format, &human, &to_json(&TaskView::from(&task)));
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `taskgate replay`.
#[derive(Debug, Args)]
pub(crate) struct ReplayArgs {
    /// The finished execution to replay.
    #[arg(required_unless_present = "key", conflicts_with = "key")]
    id: Option<String>,
    /// Replay the latest execution of this business key instead.
    #[arg(long, value_name = "BUSINESS_KEY")]
    key: Option<String>,
    /// Allow replaying a completed execution.
    #[arg(long)]
    allow_completed: bool,
    /// The new execution's payload (default: the replayed one's).
    #[arg(long)]
    payload: Option<String>,
}

/// `taskgate replay ID`: a new execution of a finished one.
pub(crate) async fn replay(args: ReplayArgs, ctx: &Context) -> Outcome {
    let mut request = match (&args.id, &args.key) {
        (Some(id), _) => {
            taskgate::validate::validate_id(id)?;
            ReplayRequest::by_id(id)
        }
        (None, Some(key)) => ReplayRequest::by_key(key),
        (None, None) => return Err(CliError::invalid("id", "give an ID or --key")),
    };
    if args.allow_completed {
        request = request.allow_completed();
    }
    if let Some(payload) = args.payload {
        request = request.with_payload(payload.into_bytes());
    }
    let broker = ctx.db.open().await?;
    let task = acted_on(broker.audited(&ctx.actor, &AdminAction::Replay(request)).await?)?;
    let human = format!("replayed {} as {} (now {})\n", task.replay_of, task.id, task.status);
    emit(ctx.format, &human, &to_json(&TaskView::from(&task)));
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}

/// The task an audited resume or replay answers with.
fn acted_on(outcome: AdminOutcome) -> Result<Task, CliError> {
    match outcome {
        AdminOutcome::Task(task) => Ok(*task),
        other => Err(CliError::Storage(taskgate::Error::backend(
            "taskgate",
            format!("the broker answered {other:?} to a resume or replay, not a task"),
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_status_names_the_valid_ones() {
        let err = parse_status("done").err().map(|e| e.to_string()).unwrap_or_default();
        assert_eq!(
            err,
            "invalid --status: unknown status \"done\"; one of blocked, pending, running, \
             retrying, completed, failed, canceled"
        );
        assert_eq!(parse_status("failed").ok(), Some(Status::Failed));
    }
}
