//! What the report measures: the fixed matrix and its sizes (full, or quick for a smoke run).

use std::time::Duration;

use benches::backend::Backend;
use benches::drive::Spec;
use benches::runtime::RtSpec;

/// The report's matrix.
pub(crate) struct Plan {
    /// How long each claim cell is measured.
    pub(crate) cell: Duration,
    /// Untimed warm-up of each cell (pools connect, statements prepare).
    pub(crate) warm_up: Duration,
    /// Claimer counts.
    pub(crate) claimers: Vec<usize>,
    /// Batch sizes.
    pub(crate) batches: Vec<usize>,
    /// Queue layouts.
    pub(crate) layouts: Vec<usize>,
    /// Layouts that also get the raw-SQL ceiling.
    pub(crate) raw_layouts: Vec<usize>,
    /// Finished rows retained for the degradation runs.
    pub(crate) retained: u64,
    /// Pickup samples on paths that wake at once / that poll.
    pub(crate) pickup_samples: (usize, usize),
    /// The worker runtime's pre-filled backlog.
    pub(crate) runtime_backlog: u64,
    /// Longest a runtime drain may run before it is stopped (its rate is then over the
    /// shorter work).
    pub(crate) runtime_limit: Duration,
    /// The steady-state producers' window.
    pub(crate) runtime_window: Duration,
    /// How long each backend's soak runs (sustained load with pruning).
    pub(crate) soak: Duration,
    /// The soak's producer rate, jobs per second.
    pub(crate) soak_rate: u32,
    /// The claim cells of the topology rows (issue 39: PgBouncer, Galera), one queue.
    pub(crate) topology_claims: Vec<Spec>,
    /// The runtime drains of the topology rows.
    pub(crate) topology_drains: Vec<RtSpec>,
    /// Rounds of the topology rows (`--rounds` overrides).
    pub(crate) topology_rounds: usize,
}

impl Plan {
    /// The report's matrix (about 10 minutes with every backend on a 2-core machine, plus a
    /// 5-minute soak per SQL backend).
    pub(crate) fn full() -> Plan {
        Plan {
            cell: Duration::from_millis(1_250),
            warm_up: Duration::from_millis(250),
            claimers: vec![1, 4, 16, 64],
            batches: vec![1, 10, 100],
            layouts: vec![1, 8],
            raw_layouts: vec![1],
            retained: 1_000_000,
            pickup_samples: (100, 30),
            runtime_backlog: benches::runtime::BACKLOG,
            runtime_limit: Duration::from_secs(8),
            runtime_window: Duration::from_secs(3),
            soak: Self::SOAK_SHORT,
            soak_rate: benches::soak::RATE,
            topology_claims: vec![
                Spec { queues: 1, claimers: 4, batch: 1 },
                Spec { queues: 1, claimers: 16, batch: 1 },
                Spec { queues: 1, claimers: 16, batch: 10 },
                Spec { queues: 1, claimers: 4, batch: 100 },
                Spec { queues: 1, claimers: 16, batch: 100 },
            ],
            topology_drains: vec![
                RtSpec { workers: 1, completer: true },
                RtSpec { workers: 16, completer: true },
                RtSpec { workers: 16, completer: false },
            ],
            topology_rounds: 3,
        }
    }

    /// A tiny matrix that exercises every path in well under a minute.
    pub(crate) fn quick() -> Plan {
        Plan {
            cell: Duration::from_millis(300),
            warm_up: Duration::from_millis(50),
            claimers: vec![1, 4],
            batches: vec![1, 100],
            layouts: vec![1, 8],
            raw_layouts: vec![1],
            retained: 20_000,
            pickup_samples: (10, 5),
            runtime_backlog: 2_000,
            runtime_limit: Duration::from_secs(2),
            runtime_window: Duration::from_millis(500),
            soak: Duration::from_secs(5),
            soak_rate: benches::soak::RATE,
            topology_claims: vec![
                Spec { queues: 1, claimers: 4, batch: 1 },
                Spec { queues: 1, claimers: 4, batch: 100 },
            ],
            topology_drains: vec![RtSpec { workers: 4, completer: true }],
            topology_rounds: 1,
        }
    }

    /// The soak of the report's short (default) mode: 5 minutes per backend.
    pub(crate) const SOAK_SHORT: Duration = Duration::from_secs(300);
    /// The soak of the report's long mode (`--long`): 30 minutes per backend.
    pub(crate) const SOAK_LONG: Duration = Duration::from_secs(1_800);

    /// A first guess of the rate of `backend` at `batch`, to size the first backlog; later
    /// cells use the measured rate of the previous one.
    pub(crate) fn guess(backend: Backend, batch: usize) -> f64 {
        let per_batch = |a: f64, b: f64, c: f64| match batch {
            0..=1 => a,
            2..=10 => b,
            _ => c,
        };
        match backend {
            Backend::Memory => per_batch(200_000.0, 400_000.0, 600_000.0),
            Backend::Sqlite => per_batch(5_000.0, 50_000.0, 250_000.0),
            Backend::Postgres => per_batch(10_000.0, 40_000.0, 100_000.0),
            Backend::MySql => per_batch(3_000.0, 10_000.0, 30_000.0),
        }
    }

    /// Backlog for a cell of `backend` expected to run at `rate`: the measured window plus
    /// the warm-up, with headroom, and at least four rounds of every claimer. Capped, since more
    /// rows only cost fill time (and memory's fill through `enqueue_many`, about 1.2 GB per
    /// 1.4 million tasks): a cell that drains its backlog early reports the drain rate over a
    /// shorter window. Memory's cap is 3,000,000 so its cells of about 2 million jobs/s measure
    /// over a second or more: at 300,000 they drained in 0.15 s, and the 4 → 64 claimer ratio
    /// read scheduling noise (finding 30).
    pub(crate) fn backlog(
        &self,
        backend: Backend,
        rate: f64,
        claimers: usize,
        batch: usize,
    ) -> u64 {
        let secs = (self.cell + self.warm_up).as_secs_f64();
        let cap = if backend == Backend::Memory { 3_000_000.0 } else { 400_000.0 };
        let wanted = (rate * secs * 1.6).min(cap);
        let floor = u64::try_from(claimers * batch * 4).unwrap_or(u64::MAX);
        benches::stats::whole(wanted).max(floor)
    }
}
