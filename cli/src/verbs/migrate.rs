//! `taskgate migrate`: applies the schema's missing migrations, or shows its version.

use std::process::ExitCode;

use clap::Args;
use serde_json::json;
use taskgate_sql::SchemaStatus;

use crate::error::{CliError, Outcome};
use crate::open::{self, Target};
use crate::output::emit;
use crate::Context;

/// Arguments of `taskgate migrate`.
#[derive(Debug, Args)]
pub(crate) struct MigrateArgs {
    /// Only show the schema's version and what is pending; change nothing.
    #[arg(long)]
    status: bool,
}

/// `taskgate migrate [--status]`.
pub(crate) async fn migrate(args: MigrateArgs, ctx: &Context) -> Outcome {
    let db = ctx.db.resolve()?;
    if db.target.is_private() {
        let human = format!("{} keeps no schema: nothing to migrate\n", db.url);
        emit(ctx.format, &human, &json!({ "prefix": db.prefix, "schema": null }));
        return Ok(ExitCode::SUCCESS);
    }
    if args.status {
        let status = open::status(&db).await?;
        emit(ctx.format, &status_text(&db.prefix, &status), &status_json(&db.prefix, &status, &[]));
        return Ok(ExitCode::SUCCESS);
    }
    let before = match open::status(&db).await {
        Err(CliError::NoDatabaseFile { .. }) => None,
        other => Some(other?),
    };
    if let Some(status) = &before {
        if status.is_ahead() {
            return Err(CliError::SchemaAhead {
                prefix: db.prefix.clone(),
                current: status.current(),
                latest: status.latest(),
            });
        }
    }
    let broker = open::connect(&db).await?;
    if !matches!(db.target, Target::Sqlite(_)) {
        open::init(&db, &*broker).await?;
    }
    broker.close().await.ok();
    let after = open::status(&db).await?;
    let was = before.and_then(|b| b.applied).unwrap_or_default();
    let applied: Vec<i64> =
        after.applied.iter().flatten().filter(|v| !was.contains(v)).copied().collect();
    let human = match applied.as_slice() {
        [] => format!("nothing to apply: {}", status_text(&db.prefix, &after)),
        versions => format!(
            "applied {}: {}",
            versions.iter().map(|v| format!("{v:04}")).collect::<Vec<_>>().join(", "),
            status_text(&db.prefix, &after)
        ),
    };
    emit(ctx.format, &human, &status_json(&db.prefix, &after, &applied));
    Ok(ExitCode::SUCCESS)
}

fn status_text(prefix: &str, status: &SchemaStatus) -> String {
    let pending = status.pending();
    match &status.applied {
        None => format!(
            "no schema with prefix {prefix:?} (version 0 of {}; `taskgate migrate` creates it)\n",
            status.latest()
        ),
        Some(_) if status.is_ahead() => format!(
            "schema {prefix:?} at version {}, newer than this taskgate knows ({})\n",
            status.current(),
            status.latest()
        ),
        Some(_) if pending.is_empty() => format!(
            "schema {prefix:?} at version {} of {} (up to date)\n",
            status.current(),
            status.latest()
        ),
        Some(_) => format!(
            "schema {prefix:?} at version {} of {}; pending: {}\n",
            status.current(),
            status.latest(),
            pending.iter().map(|(v, n)| format!("{v:04}_{n}")).collect::<Vec<_>>().join(", ")
        ),
    }
}

fn status_json(prefix: &str, status: &SchemaStatus, applied_now: &[i64]) -> serde_json::Value {
    json!({
        "prefix": prefix,
        "schema": status.applied.is_some(),
        "version": status.current(),
        "latest": status.latest(),
        "applied_versions": status.applied.clone().unwrap_or_default(),
        "pending": status.pending().iter().map(|(v, n)| json!({"version": v, "name": n})).collect::<Vec<_>>(),
        "applied_now": applied_now,
    })
}
