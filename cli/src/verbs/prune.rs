//! `taskgate prune`: deletes old finished tasks.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use serde_json::json;
use taskgate::{PruneRequest, Status, Timestamp};

use crate::error::{CliError, Outcome};
use crate::output::emit;
use crate::Context;

/// Arguments of `taskgate prune`.
#[derive(Debug, Args)]
pub(crate) struct PruneArgs {
    /// Delete tasks that finished longer ago than this, by the broker's clock: a number and a
    /// unit, s, m, h or d (`7d`, `12h`).
    #[arg(long, value_name = "AGE", required_unless_present = "before", conflicts_with = "before")]
    older_than: Option<String>,
    /// Delete tasks that finished before this RFC 3339 time (`2026-01-01T00:00:00Z`).
    #[arg(long, value_name = "TIME")]
    before: Option<String>,
    /// Only tasks in this final status (completed, failed, canceled); repeatable. Default: all
    /// three.
    #[arg(long = "status", value_name = "STATUS")]
    statuses: Vec<String>,
    /// Delete at most this many tasks (0: no limit).
    #[arg(long, default_value_t = 0)]
    limit: usize,
    /// Also delete tasks with a business key (whole chains or none); this re-opens their keys.
    #[arg(long)]
    include_keyed: bool,
}

/// `taskgate prune`: deletes finished tasks older than a cut-off and says how many.
pub(crate) async fn prune(args: PruneArgs, ctx: &Context) -> Outcome {
    let statuses = args.statuses.iter().map(|s| parse_final(s)).collect::<Result<Vec<_>, _>>()?;
    let age = args.older_than.as_deref().map(parse_age).transpose()?;
    let before = args.before.as_deref().map(str::parse::<Timestamp>).transpose()?;
    let broker = ctx.db.open().await?;
    let cutoff = match (before, age) {
        (Some(at), _) => at,
        (None, Some(age)) => broker.now().await?.saturating_sub(age),
        (None, None) => {
            return Err(CliError::invalid("--older-than", "give --older-than or --before"))
        }
    };
    let request = PruneRequest {
        finished_before: cutoff,
        statuses,
        limit: args.limit,
        include_keyed: args.include_keyed,
    };
    let deleted = broker.prune(request).await?;
    let noun = if deleted == 1 { "task" } else { "tasks" };
    let human = format!("pruned {deleted} {noun} that finished before {cutoff}\n");
    emit(ctx.format, &human, &json!({ "deleted": deleted, "finished_before": cutoff.to_string() }));
    broker.close().await.ok();
    Ok(ExitCode::SUCCESS)
}

/// A final status; anything else is an error naming the three.
fn parse_final(text: &str) -> Result<Status, CliError> {
    let refuse = || {
        CliError::invalid(
            "--status",
            format!("{text:?} is not a final status; one of completed, failed, canceled"),
        )
    };
    let status: Status = text.parse().map_err(|_| refuse())?;
    if status.is_terminal() {
        Ok(status)
    } else {
        Err(refuse())
    }
}

/// `7d`, `12h`, `30m`, `90s`.
fn parse_age(text: &str) -> Result<Duration, CliError> {
    let refuse = || {
        CliError::invalid(
            "--older-than",
            format!("{text:?} is not an age like 7d, 12h, 30m or 90s"),
        )
    };
    let digits = text.trim_end_matches(|c: char| c.is_ascii_alphabetic());
    let number: u64 = digits.parse().map_err(|_| refuse())?;
    let unit = match &text[digits.len()..] {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => return Err(refuse()),
    };
    number.checked_mul(unit).map(Duration::from_secs).ok_or_else(refuse)
}

#[cfg(test)]
mod tests {
    use super::*;
    use rstest::rstest;

    #[rstest]
    #[case("90s", Some(90))]
    #[case("30m", Some(1_800))]
    #[case("12h", Some(43_200))]
    #[case("7d", Some(604_800))]
    #[case("7", None)]
    #[case("d", None)]
    #[case("-1d", None)]
    #[case("1w", None)]
    #[case("99999999999999999d", None)]
    fn ages(#[case] text: &str, #[case] secs: Option<u64>) {
        assert_eq!(parse_age(text).ok(), secs.map(Duration::from_secs));
    }

    #[test]
    fn only_final_statuses_are_pruned() {
        assert_eq!(parse_final("failed").ok(), Some(Status::Failed));
        let err = parse_final("pending").err().map(|e| e.to_string());
        assert_eq!(
            err.as_deref(),
            Some("invalid --status: \"pending\" is not a final status; one of completed, failed, canceled")
        );
    }
}
