//! `taskgate check`: runs the contract suite against a backend, printing each case as it
//! finishes; an unreachable database is one message (exit 2), a filter that selects nothing is
//! an error, and Ctrl-C removes the storage of the case it interrupted (exit 130).

use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

use brokertest::{CaseReport, Factory, Outcome, Tracked};
use clap::Args;
use serde_json::json;

use crate::backends::{factory_for, probe, DEFAULT_URL};
use crate::error::{redact, CliError, EXIT_INTERRUPTED};
use crate::output::{err, one_line, out, Format};

/// Arguments of `taskgate check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The backend to check: memory://, sqlite:// (temporary files; the default), sqlite://PATH,
    /// postgres://…, mysql://… or mariadb://…. Each case gets its own isolated storage (a
    /// random table prefix on a database, dropped afterwards).
    #[arg(value_name = "URL")]
    target: Option<String>,
    /// Run only the cases whose name contains this text (e.g. `c07`, `quota`).
    #[arg(long)]
    filter: Option<String>,
    /// Print the case names and exit.
    #[arg(long)]
    list: bool,
}

/// How long Ctrl-C waits for the interrupted case to stop, and then for its cleanup.
const STOP_LIMIT: Duration = Duration::from_secs(10);

/// Runs the check. Exit code 0 when every selected case passed or is unsupported as the backend
/// declares, 1 when one failed, 2 when the database is unreachable, 130 after Ctrl-C.
pub(crate) async fn run(args: CheckArgs, ctx: &crate::Context) -> crate::error::Outcome {
    let format = ctx.format;
    if args.list {
        brokertest::case_names().iter().for_each(|name| out(name));
        return Ok(ExitCode::SUCCESS);
    }
    // The positional URL wins over --url / TASKGATE_URL.
    let url = args.target.or_else(|| ctx.db.url.clone()).unwrap_or_else(|| DEFAULT_URL.to_owned());
    let filter = args.filter.unwrap_or_default();
    let names: Vec<&'static str> =
        brokertest::case_names().into_iter().filter(|n| n.contains(&filter)).collect();
    if names.is_empty() {
        return Err(CliError::NoCaseMatched { filter });
    }
    let factory = factory_for(&url)?;
    probe(&url).await?;
    let backend = factory.name();
    let mut progress = Progress { format, index: 0, total: names.len(), width: width(&names) };
    let header =
        format!("taskgate check {} ({backend} backend, {})", redact(&url), cases(names.len()));
    progress.say(&header);
    let started = Instant::now();
    let (reports, interrupted) = run_cases(factory, &names, &mut progress).await;
    let elapsed = started.elapsed();
    progress.say(summary(&reports, elapsed).trim_end());
    if interrupted {
        return Ok(ExitCode::from(EXIT_INTERRUPTED));
    }
    if format == Format::Json {
        let doc = check_json(&url, &backend, &reports, elapsed);
        out(&serde_json::to_string_pretty(&doc).unwrap_or_default());
    }
    Ok(match reports.iter().all(|r| r.outcome.is_ok()) {
        true => ExitCode::SUCCESS,
        false => ExitCode::FAILURE,
    })
}

/// Progress lines: stdout for people, stderr under `--json` (stdout holds the document).
struct Progress {
    format: Format,
    index: usize,
    total: usize,
    width: usize,
}

impl Progress {
    fn say(&self, line: &str) {
        match self.format {
            Format::Human => out(line),
            Format::Json => err(line),
        }
    }

    fn case(&mut self, report: &CaseReport) {
        self.index += 1;
        self.say(&case_line(self.index, self.total, self.width, report));
    }
}

/// Runs `names` one after another on a runtime of their own, printing each as it finishes.
/// Ctrl-C stops that runtime (the running case is dropped where it stands) and removes every
/// storage no case cleaned up; the flag says it happened.
async fn run_cases(
    factory: Arc<dyn Factory>,
    names: &[&'static str],
    progress: &mut Progress,
) -> (Vec<CaseReport>, bool) {
    let mut interrupt = Interrupt::new();
    let tracker = Tracked::new(factory);
    let cases =
        match tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build() {
            Ok(rt) => rt,
            Err(e) => {
                progress.say(&format!("cannot start the cases' runtime: {e}"));
                return (Vec::new(), false);
            }
        };
    // Case failures are reported per line; the default hook would interleave backtraces.
    std::panic::set_hook(Box::new(|_| {}));
    let mut reports = Vec::new();
    let mut interrupted = false;
    for name in names {
        let factory: Arc<dyn Factory> = tracker.clone();
        let name: &'static str = name;
        let job =
            cases.spawn(async move { brokertest::run_matching(factory, |n| n == name).await });
        tokio::select! {
            joined = job => {
                let report = match joined {
                    Ok(mut one) if one.len() == 1 => one.remove(0),
                    other => CaseReport {
                        name,
                        outcome: Outcome::Failed(format!("the case did not report: {other:?}")),
                        elapsed: Duration::ZERO,
                    },
                };
                progress.case(&report);
                reports.push(report);
            }
            () = interrupt.recv() => {
                interrupted = true;
                break;
            }
        }
    }
    let _ = std::panic::take_hook();
    if !interrupted {
        cases.shutdown_background();
        return (reports, false);
    }
    progress.say(&format!(
        "interrupted during {}: stopping it and removing its storage",
        names[reports.len()]
    ));
    let _ = tokio::task::spawn_blocking(move || cases.shutdown_timeout(STOP_LIMIT)).await;
    tokio::select! {
        removed = remove_leftovers(&tracker) => progress.say(&removed),
        () = interrupt.recv() => progress.say(&format!(
            "interrupted again: left {} case storage(s) behind (the next check on this \
             database drops test tables older than an hour)",
            tracker.unfinished()
        )),
    }
    (reports, true)
}

/// Removes what the interrupted case left, twice: a statement the stopped case had already sent
/// can still commit on the server after the first pass looked.
async fn remove_leftovers(tracker: &Tracked) -> String {
    let left = tracker.unfinished();
    let mut result = Ok(());
    for pass in 0..2 {
        if pass > 0 {
            tokio::time::sleep(Duration::from_millis(300)).await;
        }
        result = match tokio::time::timeout(STOP_LIMIT, tracker.sweep()).await {
            Ok(r) => r.map(drop).map_err(|e| e.to_string()),
            Err(_) => Err(format!("cleanup still running after {STOP_LIMIT:?}")),
        };
    }
    match result {
        Ok(()) => format!("removed the storage of {left} unfinished case(s)"),
        Err(e) => format!("could not remove every case's storage: {e}"),
    }
}

/// Ctrl-C, registered before the first case starts so none is missed between cases.
struct Interrupt {
    #[cfg(unix)]
    signal: Option<tokio::signal::unix::Signal>,
}

impl Interrupt {
    fn new() -> Interrupt {
        #[cfg(unix)]
        {
            let kind = tokio::signal::unix::SignalKind::interrupt();
            Interrupt { signal: tokio::signal::unix::signal(kind).ok() }
        }
        #[cfg(not(unix))]
        Interrupt {}
    }

    /// Resolves on the next Ctrl-C (never, where no handler could be installed).
    async fn recv(&mut self) {
        #[cfg(unix)]
        match &mut self.signal {
            Some(signal) => {
                signal.recv().await;
            }
            None => std::future::pending().await,
        }
        #[cfg(not(unix))]
        {
            let _ = tokio::signal::ctrl_c().await;
        }
    }
}

/// `1 case`, `52 cases`.
fn cases(n: usize) -> String {
    match n {
        1 => "1 case".to_owned(),
        n => format!("{n} cases"),
    }
}

fn width(names: &[&str]) -> usize {
    names.iter().map(|n| n.len()).max().unwrap_or(4)
}

/// One finished case: `[ 3/52] c03_claim_mutex  passed  12 ms  detail`.
pub(crate) fn case_line(index: usize, total: usize, width: usize, r: &CaseReport) -> String {
    let digits = total.to_string().len();
    let (label, detail) = label(&r.outcome);
    let time = format_elapsed(r.elapsed);
    let line = format!(
        "[{index:>digits$}/{total}] {:<width$}  {:<11}  {time:>8}  {}",
        r.name,
        label,
        one_line(detail)
    );
    line.trim_end().to_owned()
}

fn label(outcome: &Outcome) -> (&'static str, &str) {
    match outcome {
        Outcome::Passed => ("passed", ""),
        Outcome::Failed(why) => ("FAILED", why),
        Outcome::Skipped(why) => ("skipped", why),
        Outcome::Unsupported(why) => ("unsupported", why),
    }
}

/// The closing line: how many cases, how long, and how each ended.
pub(crate) fn summary(reports: &[CaseReport], elapsed: Duration) -> String {
    let count = |f: fn(&Outcome) -> bool| reports.iter().filter(|r| f(&r.outcome)).count();
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{} in {}: {} passed, {} failed, {} skipped, {} unsupported",
        cases(reports.len()),
        format_elapsed(elapsed),
        count(|o| matches!(o, Outcome::Passed)),
        count(|o| matches!(o, Outcome::Failed(_))),
        count(|o| matches!(o, Outcome::Skipped(_))),
        count(|o| matches!(o, Outcome::Unsupported(_))),
    );
    out
}

/// `check --json`: every case with its outcome, time and message, and the totals.
pub(crate) fn check_json(
    url: &str,
    backend: &str,
    reports: &[CaseReport],
    elapsed: Duration,
) -> serde_json::Value {
    let outcome = |o: &Outcome| match o {
        Outcome::Passed => "passed",
        Outcome::Failed(_) => "failed",
        Outcome::Skipped(_) => "skipped",
        Outcome::Unsupported(_) => "unsupported",
    };
    let cases: Vec<_> = reports
        .iter()
        .map(|r| {
            json!({
                "name": r.name,
                "outcome": outcome(&r.outcome),
                "elapsed_ms": r.elapsed.as_millis(),
                "message": label(&r.outcome).1,
            })
        })
        .collect();
    let count = |name: &str| reports.iter().filter(|r| outcome(&r.outcome) == name).count();
    json!({
        "url": redact(url),
        "backend": backend,
        "cases": cases,
        "total": reports.len(),
        "passed": count("passed"),
        "failed": count("failed"),
        "skipped": count("skipped"),
        "unsupported": count("unsupported"),
        "elapsed_ms": elapsed.as_millis(),
    })
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

    fn reports() -> Vec<CaseReport> {
        vec![
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
        ]
    }

    #[test]
    fn report_lines() {
        let reports = reports();
        let names: Vec<&str> = reports.iter().map(|r| r.name).collect();
        let mut text = String::new();
        for (i, r) in reports.iter().enumerate() {
            text.push_str(&case_line(i + 1, 52, width(&names), r));
            text.push('\n');
        }
        text.push_str(&summary(&reports, Duration::from_millis(12_364)));
        insta::assert_snapshot!(text);
    }

    #[test]
    fn report_json() {
        let json = check_json(
            "postgres://u:secret@h/db",
            "postgres",
            &reports(),
            Duration::from_millis(12_364),
        );
        insta::assert_snapshot!(serde_json::to_string_pretty(&json).unwrap_or_default());
    }
}
