//! Running the model test: proptest generates and shrinks sequences on the model, and every
//! case replays its sequence against fresh backend storage, comparing each step's result and
//! the whole observable state with the model.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use proptest::test_runner::{Config, RngSeed, TestCaseError, TestError, TestRunner};
use proptest_state_machine::ReferenceStateMachine;
use taskgate::{ManualClock, PruneRequest};

use super::call::{Call, Outcome};
use super::check::{compare_state, diff_lists, diff_task};
use super::exec::{bounded, bounded_by, Exec};
use super::gen::ContractMachine;
use super::op::Op;
use super::state::Model;
use crate::deadline::Watchdog;
use crate::{require_db, Factory, Unavailable, WAIT_LIMIT};

/// Environment variable overriding the number of cases.
pub const CASES_VAR: &str = "TASKGATE_MODEL_CASES";
/// Environment variable fixing the seed (a failure report names the seed it ran with).
pub const SEED_VAR: &str = "TASKGATE_MODEL_SEED";
/// Environment variable overriding the longest sequence (default 40 steps).
pub const STEPS_VAR: &str = "TASKGATE_MODEL_STEPS";
/// Environment variable bounding shrinking, in seconds (default 180).
pub const SHRINK_VAR: &str = "TASKGATE_MODEL_SHRINK_SECS";
/// Environment variable that, when set, prints how often each kind of step had each result.
pub(crate) const STATS_VAR: &str = "TASKGATE_MODEL_STATS";

/// The fixed part of a model run's overall limit; each case adds [`CASE_ALLOWANCE`] and
/// shrinking its own limit. Past it the run's [`Watchdog`] ends the test process, naming the
/// case and step it was at (every backend call also has its own, shorter, limit).
const RUN_BASE_LIMIT: Duration = Duration::from_secs(600);
/// What each case adds to a run's overall limit (a MariaDB case takes about 1 s).
const CASE_ALLOWANCE: Duration = Duration::from_secs(10);

/// How often each kind of step ended how (`ack: Ok`, `ack: Err(LeaseLost)`, …).
type Stats = Mutex<BTreeMap<String, u64>>;

fn tally(stats: &Stats, op: &Op, outcome: &Outcome) {
    let op_name = op.to_string().split(' ').next().unwrap_or_default().to_owned();
    let result = match outcome {
        Outcome::Failed(f) => format!("Err({})", f.kind),
        Outcome::Tasks(ts) => format!("Ok({} tasks)", ts.len().min(2)),
        Outcome::MaybeTask(t) => format!("Ok({})", if t.is_some() { "Some" } else { "None" }),
        Outcome::Count(n) => format!("Ok({})", (*n).min(2)),
        Outcome::Items(items) => format!("Ok({} ok)", items.iter().filter(|r| r.is_ok()).count()),
        Outcome::Task(_) | Outcome::Done => "Ok".to_owned(),
        Outcome::Blocks => "waits".to_owned(),
    };
    let mut map = stats.lock().unwrap_or_else(|p| p.into_inner());
    *map.entry(format!("{op_name}: {result}")).or_insert(0) += 1;
}

fn env_number<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

/// The number of cases to run: `TASKGATE_MODEL_CASES` if set, else `default`.
pub fn model_cases(default: u32) -> u32 {
    env_number(CASES_VAR).unwrap_or(default)
}

/// A passed (or skipped) model test.
#[derive(Clone, Debug)]
pub struct ModelReport {
    /// The factory's name.
    pub backend: String,
    /// Cases run.
    pub cases: u32,
    /// The seed (rerun with `TASKGATE_MODEL_SEED=<seed>`).
    pub seed: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Why the test was skipped (the backend's database is unreachable), if it was.
    pub skipped: Option<String>,
}

/// A failed model test: the shrunk sequence and what went wrong at its last step.
#[derive(Clone, Debug)]
pub struct ModelFailure {
    /// The factory's name.
    pub backend: String,
    /// The seed (rerun with `TASKGATE_MODEL_SEED=<seed>`).
    pub seed: u64,
    /// Cases requested.
    pub cases: u32,
    /// The case (1-based, before shrinking) that failed first.
    pub first_failing_case: Option<u32>,
    /// What differed, at which step.
    pub reason: String,
    /// The minimal sequence, one readable line per step.
    pub steps: Vec<String>,
}

impl fmt::Display for ModelFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let first = self.first_failing_case.map_or("?".to_owned(), |n| n.to_string());
        if self.seed == 0 && self.cases == 1 {
            writeln!(f, "{} diverges from the model on this sequence", self.backend)?;
        } else {
            writeln!(
                f,
                "model test against {} failed at case {first} of {} (seed {}; rerun with \
                 {SEED_VAR}={})",
                self.backend, self.cases, self.seed, self.seed
            )?;
        }
        writeln!(f, "minimal sequence ({} steps):", self.steps.len())?;
        for (i, step) in self.steps.iter().enumerate() {
            writeln!(f, "  {:>2}. {step}", i + 1)?;
        }
        write!(f, "{}", self.reason)
    }
}

impl std::error::Error for ModelFailure {}

impl ModelFailure {
    fn setup(backend: String, reason: String) -> Self {
        ModelFailure {
            backend,
            seed: 0,
            cases: 0,
            first_failing_case: None,
            reason,
            steps: Vec::new(),
        }
    }
}

/// Runs `cases` random sequences against fresh storage from `factory` and compares every step
/// with the reference model; a failure is shrunk to a minimal sequence.
///
/// Call it from a plain `#[test]` (it runs its own tokio runtime). An unreachable database
/// skips (or fails with `TASKGATE_REQUIRE_DB=1`).
pub fn run_model_test<F: Factory + 'static>(
    factory: F,
    cases: u32,
) -> Result<ModelReport, ModelFailure> {
    let backend = factory.name();
    let started = Instant::now();
    let rt = runtime().map_err(|e| ModelFailure::setup(backend.clone(), e))?;
    let seed = env_number(SEED_VAR).unwrap_or_else(fresh_seed);
    // Printed first, so a run that fails in any way (or is killed) can be replayed.
    eprintln!("model test against {backend}: seed {seed} (rerun with {SEED_VAR}={seed})");
    let shrink = Duration::from_secs(env_number(SHRINK_VAR).unwrap_or(180));
    let limit = RUN_BASE_LIMIT + CASE_ALLOWANCE.saturating_mul(cases) + shrink;
    let watchdog = Watchdog::arm(format!("model test against {backend} (seed {seed})"), limit);
    let report = |skipped| ModelReport {
        backend: backend.clone(),
        cases,
        seed,
        elapsed: started.elapsed(),
        skipped,
    };
    if let Some(why) =
        rt.block_on(probe(&factory)).map_err(|e| ModelFailure::setup(backend.clone(), e))?
    {
        return Ok(report(Some(why)));
    }
    let mut runner = TestRunner::new(config(cases, seed));
    let steps = env_number(STEPS_VAR).unwrap_or(40usize).max(1);
    let strategy = ContractMachine::sequential_strategy(1..=steps);
    let ran = AtomicU32::new(0);
    let first_failure = AtomicU32::new(0);
    let stats = Stats::default();
    let result = runner.run(&strategy, |(_, ops, seen)| {
        let n = ran.fetch_add(1, Ordering::SeqCst) + 1;
        let watch = Watch { watchdog: &watchdog, case: n, seen: seen.as_deref() };
        let outcome = rt.block_on(run_case(&factory, &ops, &watch, &stats));
        if outcome.is_err() {
            let _ = first_failure.compare_exchange(0, n, Ordering::SeqCst, Ordering::SeqCst);
        }
        outcome.map_err(TestCaseError::fail)
    });
    let failure = |reason: String, steps: Vec<String>| ModelFailure {
        backend: backend.clone(),
        seed,
        cases,
        first_failing_case: Some(first_failure.load(Ordering::SeqCst)).filter(|n| *n != 0),
        reason,
        steps,
    };
    if std::env::var_os(STATS_VAR).is_some() {
        let map = stats.lock().unwrap_or_else(|p| p.into_inner());
        map.iter().for_each(|(k, n)| eprintln!("{n:>7}  {k}"));
    }
    match result {
        Ok(()) => Ok(report(None)),
        Err(TestError::Fail(reason, (_, ops, _))) => {
            Err(failure(reason.to_string(), ops.iter().map(ToString::to_string).collect()))
        }
        Err(TestError::Abort(reason)) => Err(failure(format!("aborted: {reason}"), Vec::new())),
    }
}

/// Whether `factory`'s database answers, on a runtime of its own: `Ok(None)` when it does,
/// `Ok(Some(why))` when it is unavailable and skipping is allowed, `Err` otherwise.
pub(crate) fn reachable(factory: &dyn Factory) -> Result<Option<String>, String> {
    runtime()?.block_on(probe(factory))
}

/// Runs one fixed sequence against fresh storage from `factory`, comparing every step with
/// the model — how a shrunk failure becomes a regression test. Call it from a plain `#[test]`.
///
/// ```ignore
/// use brokertest::model::{check_sequence, Op, TokenRef};
/// check_sequence(MyFactory, &[Op::Reap, Op::Ack { id: "t1".into(), token: TokenRef::Current, result: None }])?;
/// ```
pub fn check_sequence<F: Factory + 'static>(factory: F, ops: &[Op]) -> Result<(), ModelFailure> {
    let backend = factory.name();
    let fail = |reason: String| ModelFailure {
        backend: backend.clone(),
        seed: 0,
        cases: 1,
        first_failing_case: Some(1),
        reason,
        steps: ops.iter().map(ToString::to_string).collect(),
    };
    let rt = runtime().map_err(&fail)?;
    if let Some(why) = rt.block_on(probe(&factory)).map_err(&fail)? {
        eprintln!("\n*** SKIPPED sequence against {backend}: {why} ***\n");
        return Ok(());
    }
    let watchdog = Watchdog::arm(format!("fixed sequence against {backend}"), RUN_BASE_LIMIT);
    let watch = Watch { watchdog: &watchdog, case: 1, seen: None };
    rt.block_on(run_case(&factory, ops, &watch, &Stats::default())).map_err(fail)
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err("run the model test from a plain #[test], not inside a tokio runtime".into());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build a tokio runtime: {e}"))
}

fn fresh_seed() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    u64::try_from(nanos % u128::from(u64::MAX)).unwrap_or(0) ^ u64::from(std::process::id())
}

fn config(cases: u32, seed: u64) -> Config {
    let shrink_secs: u32 = env_number(SHRINK_VAR).unwrap_or(180);
    Config {
        cases,
        failure_persistence: None,
        rng_seed: RngSeed::Fixed(seed),
        max_shrink_time: shrink_secs.saturating_mul(1000),
        ..Config::default()
    }
}

/// `Ok(Some(why))` when the backend is unreachable and skipping is allowed.
pub(crate) async fn probe(factory: &dyn Factory) -> Result<Option<String>, String> {
    let storage = tokio::time::timeout(WAIT_LIMIT, factory.storage()).await;
    let storage = storage.map_err(|_| format!("no storage within {WAIT_LIMIT:?}"))?;
    match storage {
        Ok(storage) => match tokio::time::timeout(WAIT_LIMIT, storage.cleanup()).await {
            Ok(cleaned) => cleaned.map(|()| None).map_err(|e| format!("cleanup: {e}")),
            Err(_) => Err(format!("the probe's cleanup took over {WAIT_LIMIT:?}")),
        },
        Err(e) => match e.downcast_ref::<Unavailable>() {
            Some(u) if !require_db() => Ok(Some(u.0.clone())),
            Some(u) => Err(format!("{u} (TASKGATE_REQUIRE_DB=1 forbids skipping)")),
            None => Err(format!("cannot create storage: {e}")),
        },
    }
}

/// Where a run is, for its watchdog.
struct Watch<'a> {
    watchdog: &'a Watchdog,
    /// The case number (1-based, shrinking included).
    case: u32,
    /// The step counter proptest-state-machine reads while shrinking.
    seen: Option<&'a AtomicUsize>,
}

impl Watch<'_> {
    fn doing(&self, what: impl fmt::Display) {
        self.watchdog.doing(format!("case {}: {what}", self.case));
    }
}

/// One case: fresh storage, a broker with the model's options on a manual clock, the steps.
/// Every wait is bounded: setup and teardown by [`WAIT_LIMIT`], each call by its own limit.
async fn run_case(
    factory: &dyn Factory,
    ops: &[Op],
    watch: &Watch<'_>,
    stats: &Stats,
) -> Result<(), String> {
    watch.doing("creating storage");
    let storage = bounded_by(WAIT_LIMIT, "new storage", factory.storage()).await?;
    let storage = storage.map_err(|e| format!("cannot create storage: {e}"))?;
    let clock = ManualClock::at_contract_epoch();
    let mut model = Model::default();
    watch.doing("opening a handle");
    let outcome = match bounded_by(WAIT_LIMIT, "a handle", storage.handle()).await {
        Ok(Ok(broker)) => {
            watch.doing("init");
            let init = broker.init(model.options().broker_options(&clock));
            let outcome = match bounded("init", init).await {
                Ok(Ok(())) => {
                    let exec = Exec::new(broker.clone(), clock);
                    drive(&mut model, exec, ops, watch, stats).await
                }
                Ok(Err(e)) => Err(format!("init failed: {e}")),
                Err(hung) => Err(hung),
            };
            watch.doing("closing the handle");
            let closed = match bounded_by(WAIT_LIMIT, "close", broker.close()).await {
                Ok(closed) => closed.map_err(|e| format!("close failed: {e}")),
                Err(hung) => Err(hung),
            };
            outcome.and(closed)
        }
        Ok(Err(e)) => Err(format!("cannot open a handle: {e}")),
        Err(hung) => Err(hung),
    };
    watch.doing("removing the storage");
    let cleaned = match bounded_by(WAIT_LIMIT, "the storage's cleanup", storage.cleanup()).await {
        Ok(cleaned) => cleaned.map_err(|e| format!("cleanup failed: {e}")),
        Err(hung) => Err(hung),
    };
    outcome.and(cleaned)
}

async fn drive(
    model: &mut Model,
    mut exec: Exec,
    ops: &[Op],
    watch: &Watch<'_>,
    stats: &Stats,
) -> Result<(), String> {
    for (i, op) in ops.iter().enumerate() {
        if let Some(seen) = watch.seen {
            seen.fetch_add(1, Ordering::SeqCst);
        }
        watch.doing(format_args!("step {}: {op}", i + 1));
        let outcome = step(model, &mut exec, op).await;
        let outcome = outcome.map_err(|why| format!("step {}: {op}\n{why}", i + 1))?;
        tally(stats, op, &outcome);
    }
    Ok(())
}

/// Performs one step on both sides and compares; returns the (agreed) outcome.
async fn step(model: &mut Model, exec: &mut Exec, op: &Op) -> Result<Outcome, String> {
    let call = model.bind(op);
    if let Call::Prune(request) = &call {
        if model.prune_plan(request).is_ok_and(|p| p.is_open()) {
            let outcome = open_prune(model, exec, &call, request).await?;
            return compare_state(model, exec).await.map(|()| outcome);
        }
    }
    let expected = model.perform(&call);
    let got = exec.perform(&call, &expected).await?;
    if !expected.accepts(&got) {
        return Err(mismatch(&expected, &got));
    }
    compare_state(model, exec).await.map(|()| got)
}

/// A prune whose limit leaves the backend a choice: the backend's choice must be a valid one,
/// and the model then deletes exactly what the backend deleted.
async fn open_prune(
    model: &mut Model,
    exec: &mut Exec,
    call: &Call,
    request: &PruneRequest,
) -> Result<Outcome, String> {
    let plan = model.prune_plan(request).map_err(|f| format!("model: {f}"))?;
    let got = exec.perform(call, &Outcome::Count(0)).await?;
    let Outcome::Count(n) = got else {
        return Err(format!(
            "  expected: a count (limit {} leaves a choice)\n  got:      {got}",
            plan.limit
        ));
    };
    let remaining: BTreeSet<String> = exec.list_all().await?.into_iter().map(|t| t.id).collect();
    let deleted: BTreeSet<String> =
        model.names().into_iter().filter(|n| !remaining.contains(n)).collect();
    if u64::try_from(deleted.len()).ok() != Some(n) {
        return Err(format!("  prune returned {n} but deleted {deleted:?}"));
    }
    plan.check_choice(&deleted).map_err(|why| format!("  prune chose wrongly: {why}"))?;
    model.delete(&deleted);
    Ok(got)
}

fn mismatch(expected: &Outcome, got: &Outcome) -> String {
    let mut text = format!("  expected: {expected}\n  got:      {got}");
    let detail = match (expected, got) {
        (Outcome::Task(w), Outcome::Task(g)) => diff_task(w, g).join("\n    "),
        (Outcome::Tasks(w), Outcome::Tasks(g)) => diff_lists(w, g),
        _ => String::new(),
    };
    if !detail.is_empty() {
        text.push_str("\n  differences:\n    ");
        text.push_str(detail.trim_start());
    }
    text
}
