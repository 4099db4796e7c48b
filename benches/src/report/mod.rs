//! The report's data (what was measured, on what) and its renderings: a Markdown page
//! ([`markdown`]) and SVG charts ([`svg`]: throughput against claimers, and the soak's curves
//! over time); [`targets`] checks each number against the goal it has.

pub mod markdown;
pub mod svg;
pub mod targets;

use crate::backend::Backend;
use crate::drive::Spec;
use crate::facts::Machine;
use crate::produce::Producers;
use crate::runtime::{RtOutcome, RtSpec};
use crate::soak::{Sample, SoakSpec, Summary};
use crate::stats::Percentiles;
use crate::topology::Setup;

/// One measured claim+ack run (broker or raw).
#[derive(Clone, Debug, Default)]
pub struct Measured {
    /// Jobs per second.
    pub rate: f64,
    /// Jobs completed.
    pub jobs: u64,
    /// Write transactions per job, when known.
    pub commits_per_job: Option<f64>,
    /// True when `commits_per_job` was read from the server's counter (else counted by the
    /// harness).
    pub commits_measured: bool,
    /// Transactions the engine retried (deadlocks, lock timeouts).
    pub retries: u64,
    /// The backlog ran out before the deadline (the rate is then the drain rate).
    pub exhausted: bool,
}

/// One cell of the claim matrix.
#[derive(Clone, Debug)]
pub struct ClaimCell {
    /// The backend.
    pub backend: Backend,
    /// Queues, claimers, batch.
    pub spec: Spec,
    /// The broker's run, or why it failed.
    pub broker: Result<Measured, String>,
    /// The raw-SQL ceiling's run (SQL backends, when measured).
    pub raw: Option<Result<Measured, String>>,
}

impl ClaimCell {
    /// The broker's rate, if it ran.
    pub fn broker_rate(&self) -> Option<f64> {
        self.broker.as_ref().ok().map(|m| m.rate)
    }

    /// The raw ceiling's rate, if it ran.
    pub fn raw_rate(&self) -> Option<f64> {
        self.raw.as_ref().and_then(|r| r.as_ref().ok()).map(|m| m.rate)
    }

    /// Broker rate ÷ raw rate.
    pub fn ratio(&self) -> Option<f64> {
        match (self.broker_rate(), self.raw_rate()) {
            (Some(b), Some(r)) if r > 0.0 => Some(b / r),
            _ => None,
        }
    }
}

/// One enqueue measurement.
#[derive(Clone, Debug)]
pub struct EnqueueCell {
    /// The backend.
    pub backend: Backend,
    /// Producers and batch.
    pub scenario: Producers,
    /// Tasks per second, or why it failed.
    pub rate: Result<f64, String>,
}

/// One pickup-latency measurement.
#[derive(Clone, Debug)]
pub struct PickupCell {
    /// The backend.
    pub backend: Backend,
    /// True when the claimer was on a second handle (cross-process path).
    pub cross_handle: bool,
    /// The latencies, or why it failed.
    pub latency: Result<Percentiles, String>,
}

/// One end-to-end pipeline measurement.
#[derive(Clone, Debug)]
pub struct PipelineCell {
    /// The backend.
    pub backend: Backend,
    /// Producers (each looping `enqueue_many(batch)`).
    pub producers: usize,
    /// Claimers (each looping `dequeue_many(batch)` + `ack_many`).
    pub claimers: usize,
    /// Batch size.
    pub batch: usize,
    /// Jobs completed per second, or why it failed.
    pub rate: Result<f64, String>,
}

/// Claim+ack on a fresh table against the same on a table holding retained finished rows.
#[derive(Clone, Debug)]
pub struct DegradeCell {
    /// The backend.
    pub backend: Backend,
    /// The claim spec of both runs.
    pub spec: Spec,
    /// Finished rows retained in the table.
    pub retained: u64,
    /// Seconds the seeding took.
    pub seed_secs: f64,
    /// Fresh-table rate.
    pub fresh: Result<f64, String>,
    /// Rate with the retained rows.
    pub loaded: Result<f64, String>,
}

impl DegradeCell {
    /// Loaded rate ÷ fresh rate.
    pub fn ratio(&self) -> Option<f64> {
        match (&self.fresh, &self.loaded) {
            (Ok(f), Ok(l)) if *f > 0.0 => Some(l / f),
            _ => None,
        }
    }
}

/// What a runtime cell ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RuntimeWork {
    /// Drain a pre-filled backlog of this many no-op tasks.
    Drain(u64),
    /// Keep up with producers looping `enqueue_many(batch)`.
    Steady(Producers),
}

impl RuntimeWork {
    /// A short label.
    pub fn label(&self) -> String {
        match self {
            RuntimeWork::Drain(n) => format!("drain {} pre-filled", crate::stats::rate(*n as f64)),
            RuntimeWork::Steady(p) => {
                format!("steady: {} producers × enqueue_many({})", p.producers, p.batch)
            }
        }
    }
}

/// One worker-runtime measurement (issue 16).
#[derive(Clone, Debug)]
pub struct RuntimeCell {
    /// The backend.
    pub backend: Backend,
    /// Workers and completer.
    pub spec: RtSpec,
    /// What it ran.
    pub work: RuntimeWork,
    /// What it did, or why it failed.
    pub outcome: Result<RtOutcome, String>,
}

impl RuntimeCell {
    /// Jobs per second, if it ran.
    pub fn rate(&self) -> Option<f64> {
        self.outcome.as_ref().ok().map(RtOutcome::rate)
    }
}

/// One runtime pickup-latency measurement: enqueue → handler start on an idle worker.
#[derive(Clone, Debug)]
pub struct RuntimePickupCell {
    /// The backend.
    pub backend: Backend,
    /// True when the producer was on a second handle (as another process would be).
    pub cross_handle: bool,
    /// True for the raw-SQL ceiling of the same pickup (no broker, no runtime: an insert
    /// carrying its `pg_notify`, a `LISTEN` connection, a one-statement claim;
    /// [`crate::raw::pg_pickups`]).
    pub raw: bool,
    /// The latencies, or why it failed.
    pub latency: Result<Percentiles, String>,
}

/// One pgbench raw-ceiling cell (PostgreSQL, one queue; [`crate::pgbench`]).
#[derive(Clone, Debug)]
pub struct PgbenchCell {
    /// Queues (1), claimers (pgbench clients), batch.
    pub spec: Spec,
    /// Jobs per second and whether the backlog ran out (the rate is then a floor), or why it
    /// did not run.
    pub rate: Result<(f64, bool), String>,
}

/// One soak run (sustained load with pruning, issue 13).
#[derive(Clone, Debug)]
pub struct SoakCell {
    /// The backend.
    pub backend: Backend,
    /// Rate, duration, windows, pruning.
    pub spec: SoakSpec,
    /// The samples, or why the run failed.
    pub samples: Result<Vec<Sample>, String>,
}

impl SoakCell {
    /// The run condensed, if it ran.
    pub fn summary(&self) -> Option<Summary> {
        self.samples.as_ref().ok().map(|s| Summary::of(s))
    }
}

/// What a topology row measures (issue 39).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TopologyWork {
    /// Claim+ack of a pre-filled backlog (the claim matrix's cell; claimer `c` on handle
    /// `c % handles`).
    Claim(Spec),
    /// The worker runtime draining a pre-filled backlog of this many tasks, one runtime of the
    /// spec per handle.
    Drain(RtSpec, u64),
}

/// One topology row's figure on one setup, over the run's rounds.
#[derive(Clone, Debug)]
pub struct TopologyCell {
    /// Where the handles connected.
    pub setup: Setup,
    /// What ran.
    pub work: TopologyWork,
    /// Jobs per second of each round that ran.
    pub rates: Vec<f64>,
    /// Why rounds failed.
    pub failures: Vec<String>,
    /// Transactions the engines retried (deadlocks, lock timeouts, Galera certification
    /// conflicts), summed over the measured passes of the rounds (claim rows).
    pub retries: u64,
    /// A round ran out of backlog before the deadline (claim rows) or was stopped at its
    /// deadline before the backlog was empty (drains).
    pub short: bool,
}

impl TopologyCell {
    /// The median rate of the rounds, if any ran.
    pub fn median(&self) -> Option<f64> {
        let mut v = self.rates.clone();
        v.sort_by(f64::total_cmp);
        match v.len() {
            0 => None,
            n if n % 2 == 1 => Some(v[n / 2]),
            n => Some((v[n / 2 - 1] + v[n / 2]) / 2.0),
        }
    }
}

/// The topology rows of one run (`report --topology-only`, or the full report): PgBouncer
/// against direct, Galera node 1 and Galera spread against the single server, every setup
/// of a row measured in the same run, round by round.
#[derive(Clone, Debug, Default)]
pub struct TopologyRun {
    /// The command that measured them (`report --topology-only`, or `report`).
    pub command: String,
    /// When the rows started (UTC).
    pub started: String,
    /// Seconds the rows took.
    pub wall_secs: f64,
    /// 1-minute load average before and after the rows.
    pub load: (f64, f64),
    /// The highest 1-minute load average sampled while the rows ran (every 5 s).
    pub load_max: f64,
    /// Rounds per row (the setups of a row alternate within each round).
    pub rounds: usize,
    /// Seconds each claim cell was measured.
    pub cell_secs: f64,
    /// The cells.
    pub cells: Vec<TopologyCell>,
    /// Families that did not run, and why.
    pub skipped: Vec<String>,
    /// The servers' settings, per setup that ran (read through the harness's pool).
    pub settings: Vec<(Setup, Vec<(String, String)>)>,
}

impl TopologyRun {
    /// The cell of `work` on `setup`.
    pub fn cell(&self, setup: Setup, work: TopologyWork) -> Option<&TopologyCell> {
        self.cells.iter().find(|c| c.setup == setup && c.work == work)
    }

    /// The rows of `setups` (each work once, in the order first measured).
    pub fn works(&self, setups: &[Setup]) -> Vec<TopologyWork> {
        let mut out = Vec::new();
        for c in self.cells.iter().filter(|c| setups.contains(&c.setup)) {
            if !out.contains(&c.work) {
                out.push(c.work);
            }
        }
        out
    }
}

/// A database's settings as read from it.
#[derive(Clone, Debug)]
pub struct Database {
    /// The backend.
    pub backend: Backend,
    /// `(name, value)` pairs.
    pub settings: Vec<(String, String)>,
}

/// Everything one report run measured.
#[derive(Clone, Debug, Default)]
pub struct Report {
    /// When the run started (UTC, RFC 3339).
    pub started: String,
    /// Wall time of the whole run, seconds.
    pub wall_secs: f64,
    /// Seconds each claim cell ran.
    pub cell_secs: f64,
    /// The machine.
    pub machine: Machine,
    /// 1-minute load average at the start and at the end.
    pub load: (f64, f64),
    /// `fdatasync` latency of an 8 KiB write at the start and at the end of the run.
    pub fsync: (Option<Percentiles>, Option<Percentiles>),
    /// The databases' versions and settings.
    pub databases: Vec<Database>,
    /// Backends that did not run, and why.
    pub skipped: Vec<String>,
    /// The claim matrix.
    pub claims: Vec<ClaimCell>,
    /// Enqueue throughput.
    pub enqueues: Vec<EnqueueCell>,
    /// Pickup latency.
    pub pickups: Vec<PickupCell>,
    /// End-to-end pipelines.
    pub pipelines: Vec<PipelineCell>,
    /// Degradation with retained rows.
    pub degradations: Vec<DegradeCell>,
    /// The worker runtime end to end.
    pub runtime: Vec<RuntimeCell>,
    /// The worker runtime's pickup latency.
    pub runtime_pickups: Vec<RuntimePickupCell>,
    /// pgbench's raw ceiling of issue 13's PostgreSQL cells.
    pub pgbench: Vec<PgbenchCell>,
    /// Sustained load with pruning, per backend.
    pub soaks: Vec<SoakCell>,
    /// Hand-written findings appended to the page (`benches/report-notes.md`).
    pub notes: String,
    /// The topology rows (issue 39), when they ran.
    pub topology: Option<TopologyRun>,
    /// The topology section of the page this run replaces, kept when the run measured no
    /// topology rows (they need PgBouncer and the Galera cluster; `report --topology-only`
    /// re-measures them alone).
    pub topology_carried: Option<String>,
}
