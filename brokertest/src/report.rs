//! Running cases outside `cargo test`: [`run_all`] for `taskgate check`, and the body of every
//! test the [`contract_tests!`](crate::contract_tests) macro generates.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::cleanup::Tracked;
use crate::{Factory, Origin, Unavailable, Unsupported, CASES};

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
    run_case(case.run, factory).await
}

/// Runs one case body on its own task, bounded by [`CASE_TIMEOUT`], then removes any storage
/// it left behind.
async fn run_case(
    run: fn(Arc<dyn Factory>) -> taskgate::BoxFuture<'static, crate::CaseResult>,
    factory: Arc<dyn Factory>,
) -> Outcome {
    let tracked = Tracked::new(factory);
    let handle = tokio::spawn(run(tracked.clone()));
    let abort = handle.abort_handle();
    let outcome = judge(tokio::time::timeout(CASE_TIMEOUT, handle).await, &abort);
    // Whatever the outcome, the case's storage goes (a panicking case never reached its
    // `finish`): no tables or files are left for an hour-old sweep to find.
    match (tracked.sweep().await, outcome) {
        (Err(e), Outcome::Passed) => Outcome::Failed(format!(
            "passed, but removing its storage failed: {}",
            error_chain(&*e)
        )),
        (Err(e), Outcome::Failed(why)) => {
            Outcome::Failed(format!("{why}; removing its storage failed too: {}", error_chain(&*e)))
        }
        (_, outcome) => outcome,
    }
}

type Joined =
    Result<Result<crate::CaseResult, tokio::task::JoinError>, tokio::time::error::Elapsed>;

fn judge(joined: Joined, abort: &tokio::task::AbortHandle) -> Outcome {
    match joined {
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

/// The body of one generated test: runs case `name`, records its outcome (see
/// [`record`](crate::record())), panics when it failed, skips loudly (or fails, with
/// `TASKGATE_REQUIRE_DB=1`) when the backend is unavailable, and passes with a loud line when
/// the backend declares it does not support what the case needs.
pub async fn run_case_test(origin: Origin, name: &str, factory: Arc<dyn Factory>) {
    let backend = factory.name();
    let outcome = run_one(name, factory).await;
    crate::record(origin, &backend, "contract", name, &outcome);
    match outcome {
        Outcome::Passed => {}
        Outcome::Unsupported(why) => {
            use std::io::Write as _;
            let _ = writeln!(
                std::io::stderr(),
                "\n*** UNSUPPORTED {backend}: {name}: {why} (declared by the backend, not run) ***"
            );
        }
        Outcome::Failed(why) => panic!("{backend}: {name} failed: {why}"),
        Outcome::Skipped(why) => crate::skip(&format!("{backend}: {name}"), &why),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    use async_trait::async_trait;
    use taskgate::{BoxError, BoxFuture, Broker};

    use super::{error_chain, run_case, Outcome};
    use crate::{CaseResult, Factory, Storage};

    static MADE: AtomicUsize = AtomicUsize::new(0);
    static REMOVED: AtomicUsize = AtomicUsize::new(0);

    struct Counting;
    struct Counted;

    #[async_trait]
    impl Factory for Counting {
        fn name(&self) -> String {
            "counting".into()
        }
        async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
            MADE.fetch_add(1, Ordering::SeqCst);
            Ok(Box::new(Counted))
        }
    }

    #[async_trait]
    impl Storage for Counted {
        async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
            Err("no handles here".into())
        }
        async fn cleanup(&self) -> Result<(), BoxError> {
            REMOVED.fetch_add(1, Ordering::SeqCst);
            Ok(())
        }
    }

    fn panics_holding_two(factory: Arc<dyn Factory>) -> BoxFuture<'static, CaseResult> {
        Box::pin(async move {
            let _a = factory.storage().await?;
            let b = factory.storage().await?;
            b.cleanup().await?; // cleaned by the case: not removed twice
            panic!("an assertion failed mid-case");
        })
    }

    #[tokio::test]
    async fn a_panicking_case_leaves_no_storage_behind() {
        let outcome = run_case(panics_holding_two, Arc::new(Counting)).await;
        assert!(
            matches!(&outcome, Outcome::Failed(why) if why.contains("an assertion failed")),
            "{outcome:?}"
        );
        assert_eq!(MADE.load(Ordering::SeqCst), 2);
        assert_eq!(REMOVED.load(Ordering::SeqCst), 2, "each storage removed exactly once");
    }

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
