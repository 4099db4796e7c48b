//! The concurrency checker (histories, not a model): K workers on separate broker handles of
//! one storage claim, heartbeat, ack, fail, requeue, crash and drop futures at random over M
//! tasks with fan-in dependencies, while a producer enqueues (and cancels a few) and a reaper
//! moves the clock and reaps. Every call is recorded with start and end stamps from one
//! counter. Afterwards the history and the final state must show:
//!
//! * no two valid leases on one task at once — a call that succeeded with a token never
//!   started after a newer claim of that task had returned;
//! * every task ends terminal or claimable (or blocked on a parent still unfinished) once the
//!   workers released what they held and expired leases were reaped, and nothing runs under a
//!   lease no caller received (dropped claims are cancel-safe);
//! * in every list snapshot the reaper takes before it reaps, and once more at the end before
//!   the final reap (the reaper's defensive repair would heal a miss), no blocked task has only
//!   finished parents or a failed fail_fast parent — propagation converged in the call that
//!   finished the parent;
//! * after draining (claim and ack whatever is claimable), every task is terminal — no lost
//!   wake-up;
//! * each completed task was acked by exactly one token, and no other task was acked;
//! * Counts equal a re-aggregation of List;
//! * no child was claimed before all its parents were acked, a completed child has completed
//!   parents, and a child of a failed or cancelled parent is cancelled.
//!
//! Deadlines: a call not dropped on purpose has 30 s; the first that hangs is reported with its
//! actor, call and task (`w2: Ack h05 did not answer within 30s`) and stops every actor, so
//! the round ends at once. A round's actors have 180 s (an actor still running is named),
//! opening, checking and closing [`WAIT_LIMIT`] per step, and the whole run a watchdog that
//! names the round and phase.

mod actors;
mod record;
mod verify;

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use taskgate::{BoxError, Broker, BrokerOptions, Clock, Filter, ManualClock, Task};

use actors::{drain, plan, producer, reaper, release, Worker, World};
use record::{Act, Record, Res, Rng};

use super::exec::{bounded, bounded_by};
use crate::deadline::Watchdog;
use crate::{Factory, Storage, WAIT_LIMIT};

/// Environment variable overriding the number of rounds.
pub const ROUNDS_VAR: &str = "TASKGATE_HISTORY_ROUNDS";
/// Environment variable fixing the seed of the first round.
pub const HISTORY_SEED_VAR: &str = "TASKGATE_HISTORY_SEED";

/// The bound on one round's actors (a MariaDB round takes about 2 s); past it the round fails
/// naming the actors still running. Every call has its own, shorter, limit.
const ROUND_LIMIT: Duration = Duration::from_secs(180);

/// The size of a history check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryConfig {
    /// Workers, each on its own handle.
    pub workers: usize,
    /// Tasks (a third are roots, the rest depend on one to three earlier tasks).
    pub tasks: usize,
    /// Random actions per worker.
    pub ops_per_worker: usize,
    /// Rounds, each on fresh storage with the next seed.
    pub rounds: u32,
}

impl Default for HistoryConfig {
    /// 4 workers, 40 tasks, 200 actions per worker, 3 rounds.
    fn default() -> Self {
        HistoryConfig { workers: 4, tasks: 40, ops_per_worker: 200, rounds: 3 }
    }
}

impl HistoryConfig {
    /// The same config with `TASKGATE_HISTORY_ROUNDS` applied when set.
    pub fn with_env(mut self) -> Self {
        if let Some(rounds) = std::env::var(ROUNDS_VAR).ok().and_then(|v| v.trim().parse().ok()) {
            self.rounds = rounds;
        }
        self
    }
}

/// A passed (or skipped) history check.
#[derive(Clone, Debug, Default)]
pub struct HistoryReport {
    /// The factory's name.
    pub backend: String,
    /// Rounds run.
    pub rounds: u32,
    /// Seed of the first round.
    pub seed: u64,
    /// Calls recorded, over all rounds.
    pub calls: usize,
    /// Successful claims.
    pub claims: usize,
    /// Token calls refused with `LeaseLost`.
    pub lease_lost: usize,
    /// Calls whose future was dropped.
    pub dropped: usize,
    /// Expired leases the reaper handled.
    pub reaped: u64,
    /// Wall time.
    pub elapsed: Duration,
    /// Why the check was skipped, if it was.
    pub skipped: Option<String>,
}

/// A failed history check: the violated properties, with the records that prove them.
#[derive(Clone, Debug)]
pub struct HistoryFailure {
    /// The factory's name.
    pub backend: String,
    /// The failing round's seed (`TASKGATE_HISTORY_SEED` replays its choices; the
    /// interleaving is real concurrency and differs run to run).
    pub seed: u64,
    /// The failing round (1-based).
    pub round: u32,
    /// What was violated.
    pub violations: Vec<String>,
}

impl fmt::Display for HistoryFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "history check against {} failed in round {} (seed {}): {} violation(s)",
            self.backend,
            self.round,
            self.seed,
            self.violations.len()
        )?;
        for v in self.violations.iter().take(12) {
            writeln!(f, "  - {v}")?;
        }
        Ok(())
    }
}

impl std::error::Error for HistoryFailure {}

/// Runs `config.rounds` concurrent histories against fresh storage from `factory` and checks
/// each (see the [module docs](self)). Call it from a plain `#[test]`.
pub fn run_history_check<F: Factory + 'static>(
    factory: F,
    config: HistoryConfig,
) -> Result<HistoryReport, HistoryFailure> {
    let backend = factory.name();
    let started = Instant::now();
    let seed = std::env::var(HISTORY_SEED_VAR)
        .ok()
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(fresh_seed);
    let fail =
        |round, violations| HistoryFailure { backend: backend.clone(), seed, round, violations };
    let rt = runtime().map_err(|e| fail(0, vec![e]))?;
    let mut report = HistoryReport { backend: backend.clone(), seed, ..HistoryReport::default() };
    if let Some(why) = rt.block_on(super::run::probe(&factory)).map_err(|e| fail(0, vec![e]))? {
        report.skipped = Some(why);
        return Ok(report);
    }
    eprintln!("history check against {backend}: seed {seed} ({HISTORY_SEED_VAR}={seed})");
    // Each round: its actors, then checks, opening and closing handles.
    let limit = (ROUND_LIMIT + 4 * WAIT_LIMIT).saturating_mul(config.rounds.max(1));
    let watchdog = Watchdog::arm(format!("history check against {backend} (seed {seed})"), limit);
    for round in 1..=config.rounds {
        let round_seed = seed.wrapping_add(u64::from(round - 1));
        let doing = |what: &str| watchdog.doing(format!("round {round}: {what}"));
        let records =
            rt.block_on(run_round(&factory, &config, round_seed, &doing)).map_err(|v| {
                HistoryFailure { backend: backend.clone(), seed: round_seed, round, violations: v }
            })?;
        tally(&mut report, &records.0);
        report.reaped += records.1;
        report.rounds = round;
    }
    report.elapsed = started.elapsed();
    Ok(report)
}

fn tally(report: &mut HistoryReport, records: &[Record]) {
    report.calls += records.len();
    report.claims += records.iter().filter(|r| r.act == Act::Claim && !r.task.is_empty()).count();
    report.lease_lost +=
        records.iter().filter(|r| r.res == Res::Err(taskgate::ErrorKind::LeaseLost)).count();
    report.dropped += records.iter().filter(|r| r.res == Res::Dropped).count();
}

fn runtime() -> Result<tokio::runtime::Runtime, String> {
    if tokio::runtime::Handle::try_current().is_ok() {
        return Err("run the history check from a plain #[test], not inside a tokio runtime".into());
    }
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot build a tokio runtime: {e}"))
}

fn fresh_seed() -> u64 {
    let nanos = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_nanos());
    u64::try_from(nanos % u128::from(u64::MAX)).unwrap_or(0)
}

/// The handles of one round and the storage they share.
struct Round {
    storage: Box<dyn Storage>,
    handles: Vec<Arc<dyn Broker>>,
    options: BrokerOptions,
}

impl Round {
    async fn open(&mut self, who: &str) -> Result<Arc<dyn Broker>, String> {
        let open_err = |e: BoxError| format!("cannot open a handle for {who}: {e}");
        let what = format!("a handle for {who}");
        let handle =
            bounded_by(WAIT_LIMIT, &what, self.storage.handle()).await?.map_err(open_err)?;
        let what = format!("init of {who}'s handle");
        bounded_by(WAIT_LIMIT, &what, handle.init(self.options.clone()))
            .await?
            .map_err(|e| open_err(e.into()))?;
        self.handles.push(handle.clone());
        Ok(handle)
    }

    async fn close(self) -> Result<(), String> {
        for (k, handle) in self.handles.iter().enumerate() {
            let what = format!("close of handle {k}");
            bounded_by(WAIT_LIMIT, &what, handle.close())
                .await?
                .map_err(|e| format!("close failed: {e}"))?;
        }
        bounded_by(WAIT_LIMIT, "the storage's cleanup", self.storage.cleanup())
            .await?
            .map_err(|e| format!("cleanup failed: {e}"))
    }
}

async fn run_round(
    factory: &dyn Factory,
    config: &HistoryConfig,
    seed: u64,
    doing: &dyn Fn(&str),
) -> Result<(Vec<Record>, u64), Vec<String>> {
    doing("creating storage");
    let storage =
        bounded_by(WAIT_LIMIT, "new storage", factory.storage()).await.map_err(|e| vec![e])?;
    let storage = storage.map_err(|e| vec![format!("cannot create storage: {e}")])?;
    let clock = ManualClock::at_contract_epoch();
    let options = BrokerOptions {
        default_lease_ttl: Duration::from_secs(60),
        lease_lost_max: 5,
        throttled_max: 3,
        clock: Some(Arc::new(clock.clone()) as Arc<dyn Clock>),
        ..BrokerOptions::default()
    };
    let mut round = Round { storage, handles: Vec::new(), options };
    let world = Arc::new(World::new(clock));
    let outcome = play(&mut round, &world, config, seed, doing).await;
    doing("closing handles, removing the storage");
    let closed = round.close().await;
    let mut violations = match outcome {
        Ok(v) => v,
        Err(e) => vec![e],
    };
    violations.extend(closed.err());
    violations.extend(world.hangs.lock().unwrap_or_else(|p| p.into_inner()).iter().cloned());
    if violations.is_empty() {
        Ok((world.recorder.all(), world.reaped.load(Ordering::SeqCst)))
    } else {
        Err(violations)
    }
}

/// Runs the actors, then checks the history and the final state (not after a hang: the round
/// then reports the call that hung).
async fn play(
    round: &mut Round,
    world: &Arc<World>,
    config: &HistoryConfig,
    seed: u64,
    doing: &dyn Fn(&str),
) -> Result<Vec<String>, String> {
    doing("opening handles");
    let mut rng = Rng::new(seed);
    let planned = plan(config.tasks, &mut rng);
    let produce = tokio::spawn(producer(
        round.open("producer").await?,
        world.clone(),
        planned,
        Rng::new(rng.next()),
    ));
    let reap =
        tokio::spawn(reaper(round.open("reaper").await?, world.clone(), Rng::new(rng.next())));
    let mut workers = Vec::new();
    for k in 0..config.workers {
        let broker = round.open(&format!("w{k}")).await?;
        let worker = Worker {
            name: format!("w{k}"),
            broker: broker.clone(),
            world: world.clone(),
            rng: Rng::new(rng.next()),
            held: Vec::new(),
        };
        workers.push((broker, tokio::spawn(worker.run(config.ops_per_worker))));
    }
    doing("actors running");
    let deadline = tokio::time::Instant::now() + ROUND_LIMIT;
    let mut held = Vec::new();
    let halt = |e: String| {
        world.halt();
        e
    };
    for (k, (broker, join)) in workers.into_iter().enumerate() {
        let leases = joined(deadline, &format!("worker w{k}"), join).await.map_err(halt)?;
        held.push((k, broker, leases));
    }
    joined(deadline, "the producer", produce).await.map_err(halt)?;
    world.stop.store(true, Ordering::SeqCst);
    joined(deadline, "the reaper", reap).await.map_err(halt)?;
    if world.halted() {
        return Ok(Vec::new());
    }
    doing("releasing the workers' leases");
    for (k, broker, leases) in held {
        release(&*broker, world, &format!("w{k}"), leases).await;
    }
    doing("checking the final state");
    let checker = round.open("the checker").await?;
    check(&*checker, world).await
}

/// An actor's result, by `deadline` (the round's limit).
async fn joined<T>(
    deadline: tokio::time::Instant,
    actor: &str,
    join: tokio::task::JoinHandle<T>,
) -> Result<T, String> {
    let abort = join.abort_handle();
    match tokio::time::timeout_at(deadline, join).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("{actor} panicked: {e}")),
        Err(_) => {
            abort.abort();
            Err(format!("{actor} still running {ROUND_LIMIT:?} after the round started"))
        }
    }
}

async fn list(broker: &dyn Broker) -> Result<Vec<Task>, String> {
    match bounded("list", broker.list(&Filter::default())).await? {
        Ok(tasks) => Ok(tasks),
        Err(e) => Err(format!("list failed: {e}")),
    }
}

/// The final-state checks and the history checks, in order.
async fn check(broker: &dyn Broker, world: &World) -> Result<Vec<String>, String> {
    let mut violations = settle(broker, world).await?;
    violations.extend(verify::converged(&list(broker).await?));
    world.clock.advance(Duration::from_secs(61));
    bounded("reap_expired", broker.reap_expired())
        .await?
        .map_err(|e| format!("reap failed: {e}"))?;
    violations.extend(verify::terminal_or_claimable(&list(broker).await?));
    let drained = bounded_by(WAIT_LIMIT, "the final drain", drain(broker, world, 200)).await?;
    drained.map_err(|e| format!("drain failed: {e}"))?;
    let tasks = list(broker).await?;
    let stuck: Vec<String> = tasks
        .iter()
        .filter(|t| !t.status.is_terminal())
        .map(|t| format!("{} {}", t.id, t.status))
        .collect();
    if !stuck.is_empty() {
        violations.push(format!("lost wake-up: never finished after draining: {stuck:?}"));
    }
    let counts =
        bounded("counts", broker.counts()).await?.map_err(|e| format!("counts failed: {e}"))?;
    violations.extend(verify::counts_match(&counts, &tasks));
    let records = world.recorder.all();
    violations.extend(verify::exclusive_leases(&records));
    violations.extend(verify::acked_once(&records, &tasks));
    violations.extend(verify::children_after_parents(&records, &tasks));
    violations.extend(verify::final_dependencies(&tasks));
    Ok(violations)
}

/// Waits (up to 2 s real time) until no task runs under a lease nobody received — a dropped
/// claim must hand its task back at once — and reports those that still do.
async fn settle(broker: &dyn Broker, world: &World) -> Result<Vec<String>, String> {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let leaked = verify::leaked_claims(&world.recorder.all(), &list(broker).await?);
        if leaked.is_empty() || Instant::now() > deadline {
            return Ok(leaked);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
