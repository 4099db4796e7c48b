//! The queue verbs: `pause`, `unpause`, `stats`.

use std::collections::BTreeMap;
use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use taskgate::{AdminAction, Broker, Status};

use crate::error::Outcome;
use crate::output::{emit, table};
use crate::Context;

/// Arguments of `taskgate pause` and `taskgate unpause`.
#[derive(Debug, Args)]
pub(crate) struct QueueArgs {
    /// The queues.
    #[arg(required = true, value_name = "QUEUE")]
    queues: Vec<String>,
}

/// `taskgate pause QUEUE…`: no task of these queues is claimed until they are unpaused.
pub(crate) async fn pause(args: QueueArgs, ctx: &Context) -> Outcome {
    set_paused(args, true, ctx).await
}

/// `taskgate unpause QUEUE…`: claims from these queues resume.
pub(crate) async fn unpause(args: QueueArgs, ctx: &Context) -> Outcome {
    set_paused(args, false, ctx).await
}

async fn set_paused(args: QueueArgs, paused: bool, ctx: &Context) -> Outcome {
    for queue in &args.queues {
        taskgate::validate::validate_queue(queue)?;
    }
    let broker = ctx.db.open().await?;
    for queue in &args.queues {
        let queue = queue.clone();
        let action = match paused {
            true => AdminAction::PauseQueue { queue },
            false => AdminAction::ResumeQueue { queue },
        };
        broker.audited(&ctx.actor, &action).await?;
    }
    let now_paused = broker.paused_queues().await?;
    let verb = if paused { "paused" } else { "unpaused" };
    let list = |q: &[String]| if q.is_empty() { "none".to_owned() } else { q.join(", ") };
    let human =
        format!("{verb} {}\npaused queues now: {}\n", args.queues.join(", "), list(&now_paused));
    emit(ctx.format, &human, &json!({ verb: args.queues, "paused_queues": now_paused }));
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}

/// Arguments of `taskgate stats`.
#[derive(Debug, Args)]
pub(crate) struct StatsArgs {
    /// Also show how many tasks wait in this queue (pending and retrying, delayed ones
    /// included); repeatable.
    #[arg(long = "queue", value_name = "QUEUE")]
    queues: Vec<String>,
}

/// `taskgate stats`: tasks by type and status, paused queues, queue lengths.
pub(crate) async fn stats(args: StatsArgs, ctx: &Context) -> Outcome {
    for queue in &args.queues {
        taskgate::validate::validate_queue(queue)?;
    }
    let broker = ctx.db.open().await?;
    let counts = broker.counts().await?;
    let paused = broker.paused_queues().await?;
    let lengths = queue_lengths(&*broker, &args.queues).await?;
    let mut totals: BTreeMap<Status, u64> = Status::ALL.iter().map(|s| (*s, 0)).collect();
    for by_status in counts.values() {
        for (status, n) in by_status {
            *totals.entry(*status).or_default() += n;
        }
    }
    let human = stats_text(&counts, &totals, &paused, &lengths);
    let json = json!({
        "counts": counts,
        "totals": totals,
        "paused_queues": paused,
        "queue_lengths": lengths,
    });
    emit(ctx.format, &human, &json);
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}

async fn queue_lengths(
    broker: &dyn Broker,
    queues: &[String],
) -> taskgate::Result<BTreeMap<String, u64>> {
    let mut lengths = BTreeMap::new();
    for queue in queues {
        lengths.insert(queue.clone(), broker.queue_len(queue).await?);
    }
    Ok(lengths)
}

fn stats_text(
    counts: &taskgate::Counts,
    totals: &BTreeMap<Status, u64>,
    paused: &[String],
    lengths: &BTreeMap<String, u64>,
) -> String {
    let row = |name: &str, by: &BTreeMap<Status, u64>| {
        let mut cells = vec![name.to_owned()];
        cells.extend(Status::ALL.iter().map(|s| by.get(s).copied().unwrap_or(0).to_string()));
        cells.push(by.values().sum::<u64>().to_string());
        cells
    };
    let mut rows: Vec<Vec<String>> = counts.iter().map(|(t, by)| row(t, by)).collect();
    rows.push(row("(all types)", totals));
    let mut header = vec!["TYPE"];
    header.extend(Status::ALL.iter().map(|s| s.as_str()));
    header.push("total");
    let mut out = table(&header, &rows);
    let paused = if paused.is_empty() { "none".to_owned() } else { paused.join(", ") };
    out.push_str(&format!("paused queues: {paused}\n"));
    for (queue, n) in lengths {
        out.push_str(&format!("queue {queue}: {n} waiting (pending or retrying)\n"));
    }
    out
}
