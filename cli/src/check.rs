//! `taskgate check`: runs the contract suite and renders the per-case table.

use std::fmt::Write as _;
use std::process::ExitCode;
use std::time::Duration;

use brokertest::{CaseReport, Outcome};
use clap::Args;

use crate::backends::{factory_for, DEFAULT_URL, SCHEMES};

/// Arguments of `taskgate check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The backend to check: memory://, sqlite:// (temporary files; the default), sqlite://PATH,
    /// postgres://…, mysql://… or mariadb://…. Each case gets its own isolated storage.
    #[arg(default_value = DEFAULT_URL)]
    url: String,
    /// Run only the cases whose name contains this text (e.g. `c07`, `quota`).
    #[arg(long)]
    filter: Option<String>,
    /// Print the case names and exit.
    #[arg(long)]
    list: bool,
}

/// Runs the check; the exit code is 0 only when every selected case passed or is unsupported
/// as the backend declares.
pub(crate) async fn run(args: CheckArgs) -> ExitCode {
    if args.list {
        brokertest::case_names().iter().for_each(|name| println!("{name}"));
        return ExitCode::SUCCESS;
    }
    let factory = match factory_for(&args.url) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("taskgate check: {e}\n(supported: {SCHEMES})");
            return ExitCode::from(2);
        }
    };
    println!("taskgate check {} ({} backend)", args.url, factory.name());
    // Case failures are reported in the table; the default hook would interleave backtraces.
    std::panic::set_hook(Box::new(|_| {}));
    let filter = args.filter.unwrap_or_default();
    let reports = brokertest::run_matching(factory, |name| name.contains(&filter)).await;
    let _ = std::panic::take_hook();
    print!("{}", render(&reports));
    if reports.iter().all(|r| r.outcome.is_ok()) && !reports.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

/// The table people read: one line per case, then a summary line. A case the backend declares
/// it does not support (`unsupported`) is neither passed nor failed.
pub(crate) fn render(reports: &[CaseReport]) -> String {
    let width = reports.iter().map(|r| r.name.len()).max().unwrap_or(4).max(4);
    let mut out = String::new();
    let _ = writeln!(out, "{:<width$}  {:<11}  {:>8}  detail", "case", "result", "time");
    for r in reports {
        let (label, detail) = match &r.outcome {
            Outcome::Passed => ("passed", String::new()),
            Outcome::Failed(why) => ("FAILED", one_line(why)),
            Outcome::Skipped(why) => ("skipped", one_line(why)),
            Outcome::Unsupported(why) => ("unsupported", one_line(why)),
        };
        let time = format_elapsed(r.elapsed);
        let line = format!("{:<width$}  {label:<11}  {time:>8}  {detail}", r.name);
        let _ = writeln!(out, "{}", line.trim_end());
    }
    let count = |f: fn(&Outcome) -> bool| reports.iter().filter(|r| f(&r.outcome)).count();
    let _ = writeln!(
        out,
        "{} cases: {} passed, {} failed, {} skipped, {} unsupported",
        reports.len(),
        count(|o| matches!(o, Outcome::Passed)),
        count(|o| matches!(o, Outcome::Failed(_))),
        count(|o| matches!(o, Outcome::Skipped(_))),
        count(|o| matches!(o, Outcome::Unsupported(_))),
    );
    out
}

fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

fn format_elapsed(d: Duration) -> String {
    if d < Duration::from_secs(10) {
        format!("{} ms", d.as_millis())
    } else {
        format!("{:.1} s", d.as_secs_f64())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_table() {
        let reports = vec![
            CaseReport {
                name: "c01_round_trip",
                outcome: Outcome::Passed,
                elapsed: Duration::from_millis(3),
            },
            CaseReport {
                name: "c07_lease_reap",
                outcome: Outcome::Failed("reap after 61 s: expected 1,\n got 0".into()),
                elapsed: Duration::from_millis(12),
            },
            CaseReport {
                name: "c47_cross_process_wakeup",
                outcome: Outcome::Unsupported("sqlite declares no cross-process wake-ups".into()),
                elapsed: Duration::from_millis(4),
            },
            CaseReport {
                name: "q5_quota_concurrent_race",
                outcome: Outcome::Skipped("TASKGATE_PG_URL is not set".into()),
                elapsed: Duration::from_millis(12_345),
            },
        ];
        insta::assert_snapshot!(render(&reports));
    }
}
