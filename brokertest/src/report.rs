//! Running cases outside `cargo test`: [`run_all`] for `taskgate check`, and the body of every
//! test the [`contract_tests!`](crate::contract_tests) macro generates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::{Factory, Unavailable, Unsupported, CASES};

/// Longest a single case may run before it counts as failed (a hang is a failure).
pub const CASE_TIMEOUT: Duration = Duration::from_secs(300);

/// How one case ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every assertion held.
    Passed,
    /// An assertion failed, an operation errored, the case panicked or timed out.
    Failed(String),
    /// The backend's database was not reachable.
    Skipped(String),
    /// The case needs something the backend declares it does not have
    /// ([`Need`](crate::Need)): not run, and neither passed nor failed.
    Unsupported(String),
}

impl Outcome {
    /// True for the outcomes a run may end with and still pass: passed, or unsupported as
    /// the backend declared.
    pub fn is_ok(&self) -> bool {
        matches!(self, Outcome::Passed | Outcome::Unsupported(_))
    }
}

/// One case's result.
#[derive(Clone, Debug)]
pub struct CaseReport {
    /// The stable case name.
    pub name: &'static str,
    /// How it ended.
    pub outcome: Outcome,
    /// How long it ran.
    pub elapsed: Duration,
}

/// The stable names of every case, in suite order.
pub fn case_names() -> Vec<&'static str> {
    CASES.iter().map(|c| c.name).collect()
}

/// Runs every case against `factory`, one after another, and reports each.
pub async fn run_all(factory: Arc<dyn Factory>) -> Vec<CaseReport> {
    run_matching(factory, |_| true).await
}

/// Runs the cases whose name passes `filter`.
pub async fn run_matching(
    factory: Arc<dyn Factory>,
    filter: impl Fn(&str) -> bool,
) -> Vec<CaseReport> {
    let mut reports = Vec::new();
    for case in CASES.iter().filter(|c| filter(c.name)) {
        let started = Instant::now();
        let outcome = run_one(case.name, factory.clone()).await;
        reports.push(CaseReport { name: case.name, outcome, elapsed: started.elapsed() });
    }
    reports
}

async fn run_one(name: &str, factory: Arc<dyn Factory>) -> Outcome {
    let Some(case) = CASES.iter().find(|c| c.name == name) else {
        return Outcome::Failed(format!("no case named {name}"));
    };
    let handle = tokio::spawn((case.run)(factory));
    let abort = handle.abort_handle();
    match tokio::time::timeout(CASE_TIMEOUT, handle).await {
        Err(_) => Outcome::Failed({
            abort.abort();
            format!(
                "still running after {CASE_TIMEOUT:?}: a call without a deadline of its own hung \
             (every harness wait has one)"
            )
        }),
        Ok(Ok(Ok(()))) => Outcome::Passed,
        Ok(Ok(Err(e))) => {
            if let Some(u) = e.downcast_ref::<Unavailable>() {
                Outcome::Skipped(u.0.clone())
            } else if let Some(u) = e.downcast_ref::<Unsupported>() {
                Outcome::Unsupported(u.0.clone())
            } else {
                Outcome::Failed(error_chain(&*e))
            }
        }
        Ok(Err(join)) if join.is_panic() => Outcome::Failed(panic_message(join.into_panic())),
        Ok(Err(join)) => Outcome::Failed(format!("case task ended: {join}")),
    }
}

/// `e` and its sources, joined with `: `; a source whose text the message already carries
/// (`taskgate::Error::Backend` prints its cause) is not repeated.
fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !text.contains(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        source = s.source();
    }
    text
}

fn panic_message(payload: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = payload.downcast_ref::<&str>() {
        (*s).to_owned()
    } else if let Some(s) = payload.downcast_ref::<String>() {
        s.clone()
    } else {
        "case panicked".to_owned()
    }
}

/// True when `TASKGATE_REQUIRE_DB=1`: an unreachable database fails instead of skipping.
pub fn require_db() -> bool {
    std::env::var("TASKGATE_REQUIRE_DB").is_ok_and(|v| v == "1")
}

/// The body of one generated test: runs case `name`, panics when it fails, skips loudly (or
/// fails, with `TASKGATE_REQUIRE_DB=1`) when the backend is unavailable, and passes with a
/// loud line when the backend declares it does not support what the case needs.
pub async fn run_case_test(name: &str, factory: Arc<dyn Factory>) {
    let backend = factory.name();
    match run_one(name, factory).await {
        Outcome::Passed => {}
        Outcome::Unsupported(why) => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "\n*** UNSUPPORTED {backend}: {name}: {why} (declared by the backend, not run) ***"
            );
        }
        Outcome::Failed(why) => panic!("{backend}: {name} failed: {why}"),
        Outcome::Skipped(why) if require_db() => {
            panic!("{backend}: {name}: {why} (TASKGATE_REQUIRE_DB=1 forbids skipping)")
        }
        Outcome::Skipped(why) => {
            // Written to the stderr handle, not with `eprintln!`: the test harness captures the
            // print macros of passing tests, and a skip must be seen.
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "\n*** SKIPPED {backend}: {name}: {why} (set TASKGATE_REQUIRE_DB=1 to fail instead) ***"
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::error_chain;

    #[test]
    fn a_chain_does_not_repeat_a_cause_the_message_names() {
        let e = taskgate::Error::backend("sqlite", std::io::Error::other("disk I/O error"));
        assert_eq!(error_chain(&e), "sqlite backend error: disk I/O error");
        #[derive(Debug)]
        struct Outer(std::io::Error);
        impl std::fmt::Display for Outer {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("case failed")
            }
        }
        impl std::error::Error for Outer {
            fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
                Some(&self.0)
            }
        }
        let outer = Outer(std::io::Error::other("refused"));
        assert_eq!(error_chain(&outer), "case failed: refused");
    }
}
