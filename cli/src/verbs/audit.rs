//! `taskgate audit`: the audit log of operator actions (the CLI's and the admin API's), newest
//! first, in the admin API's record shape.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use taskgate::AuditQuery;
use taskgate_admin::AuditView;

use crate::error::Outcome;
use crate::output::{clip, emit, table};
use crate::Context;

/// Arguments of `taskgate audit`.
#[derive(Debug, Args)]
pub(crate) struct AuditArgs {
    /// Only this actor's records (`cli:alice`, an admin token's name).
    #[arg(long = "by", value_name = "ACTOR")]
    by: Option<String>,
    /// Only this action: cancel, resume, replay, pause_queue or resume_queue.
    #[arg(long)]
    action: Option<String>,
    /// Only records about this target: `task:<id>`, `key:<business key>` or `queue:<name>`.
    #[arg(long)]
    target: Option<String>,
    /// At most this many records (0: all).
    #[arg(long, default_value_t = 50)]
    limit: usize,
    /// Skip this many records first (paging).
    #[arg(long, default_value_t = 0)]
    offset: usize,
}

/// `taskgate audit`: who did what to which task or queue, when, and how it ended.
pub(crate) async fn audit(args: AuditArgs, ctx: &Context) -> Outcome {
    let query = AuditQuery {
        actor: args.by.unwrap_or_default(),
        action: args.action.unwrap_or_default(),
        target: args.target.unwrap_or_default(),
        limit: args.limit,
        offset: args.offset,
    };
    let broker = ctx.db.open().await?;
    let records: Vec<AuditView> =
        broker.audit_log(&query).await?.into_iter().map(AuditView::from).collect();
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.at.clone(),
                r.actor.clone(),
                r.action.clone(),
                r.target.clone(),
                r.outcome.clone(),
                clip(&r.detail, 40),
            ]
        })
        .collect();
    let human = match rows.is_empty() {
        true => "no audit records\n".to_owned(),
        false => table(&["AT", "ACTOR", "ACTION", "TARGET", "OUTCOME", "DETAIL"], &rows),
    };
    let json = json!({ "records": records, "limit": query.limit, "offset": query.offset });
    emit(ctx.format, &human, &json);
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}
