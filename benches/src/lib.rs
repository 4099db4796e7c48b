//! taskgate benchmarks (extensions §E14): the workloads that the criterion benches in
//! `benches/benches/` and the `report` command share.
//!
//! * [`backend`] opens a fresh, isolated storage ("bed") per measurement on every available
//!   backend — memory, SQLite, and PostgreSQL / MySQL when `TASKGATE_PG_URL` /
//!   `TASKGATE_MYSQL_URL` are set — with the backends' public constructors, plus the harness's
//!   own connection pool on the same tables for bulk fills and raw-SQL ceilings.
//! * [`fill`] pre-fills a backlog or seeds retained finished rows with one bulk
//!   `INSERT … SELECT` that copies a task the broker itself enqueued.
//! * [`drive`] runs N claimers, each looping `dequeue_many` + `ack_many`, until a per-queue
//!   backlog is drained or a deadline passes; [`raw`] runs the same loop as plain SQL (the
//!   database's own ceiling for the same work).
//! * [`produce`] measures enqueue; [`pickup`] the time from enqueue to claim by an idle
//!   claimer; [`facts`] reads the machine and the database servers' versions and settings.
//! * [`runtime`](mod@runtime) runs the worker runtime (`taskgate-worker`) end to end: draining a backlog,
//!   steady producers, and an idle worker's pickup latency.
//! * [`soak`] keeps producers and claimers at a fixed rate with pruning on for minutes and
//!   samples latency, backlog and the storage's size (sustained load without bloat).
//! * [`topology`] says where the handles of the topology rows connect (issue 39: PgBouncer,
//!   a Galera cluster) and why a family of them cannot run here.
//! * [`portable`] holds the pieces of the `portable-adapter` binary (issue 42): settings,
//!   the rolling latency window, clock-aligned ticks and the JSONL records of the independent
//!   benchmark's long-horizon protocol.
//! * [`report`] renders the Markdown table and the SVG chart.
//!
//! Numbers are measured here, never asserted: targets are checked and reported by the report.

pub mod backend;
pub mod drive;
pub mod facts;
pub mod fill;
pub mod pgbench;
pub mod pickup;
pub mod portable;
pub mod produce;
pub mod raw;
pub mod report;
pub mod runtime;
pub mod soak;
pub mod stats;
pub mod topology;

pub use taskgate::BoxError;

/// The result type of the harness: any error, boxed.
pub type Result<T> = std::result::Result<T, BoxError>;

/// True when a criterion bench binary runs in test mode (`cargo bench -- --test`): every
/// bench then runs once on small data, so CI proves the benches still work.
pub fn criterion_test_mode() -> bool {
    std::env::args().any(|a| a == "--test")
}

/// The tokio runtime every benchmark runs on: multi-threaded, one worker per core.
pub fn runtime() -> Result<tokio::runtime::Runtime> {
    let workers = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(2);
    Ok(tokio::runtime::Builder::new_multi_thread().worker_threads(workers).enable_all().build()?)
}
