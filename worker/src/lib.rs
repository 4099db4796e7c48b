//! The taskgate worker runtime: so nobody writes a worker loop again.
//!
//! A [`Runtime`] drives any taskgate [`Broker`](taskgate::Broker) (memory, SQLite, PostgreSQL,
//! MySQL/MariaDB): typed [`Job`]s submitted through a [`Client`], per-queue workers with
//! concurrency, rate and quota limits, automatic heartbeats, retries with back-off, one
//! reaper per `Runtime`, batched acks, graceful shutdown and periodic (cron) jobs that run once
//! per tick across processes (`Periodic`, with the `cron` cargo feature: off by default, so a
//! worker without schedules does not compile the cron parser and the time-zone database). The behaviour is contract §12 (`docs/contract.md`);
//! the decisions taken where it is silent are in `docs/decisions.md` ("Worker runtime").
//!
//! ```
//! use std::sync::Arc;
//! use std::time::Duration;
//! use serde::{Deserialize, Serialize};
//! use taskgate_worker::{Config, Job, JobError, QueueConfig, Runtime};
//!
//! #[derive(Serialize, Deserialize)]
//! struct Resize { image: String, width: u32 }
//!
//! impl Job for Resize {
//!     const KIND: &'static str = "resize";
//!     type Output = String;
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let broker = Arc::new(taskgate_memory::MemoryBroker::new());
//! let runtime = Runtime::builder(broker)
//!     .config(Config::new().queue("resize", QueueConfig::workers(4)))
//!     .register(|job: Resize, ctx| async move {
//!         if job.width == 0 {
//!             return Err(JobError::skip(JobError::msg("width 0"))); // fail, no retry
//!         }
//!         Ok(format!("{}@{}w (run {})", job.image, job.width, ctx.attempts() + 1))
//!     })
//!     .start()
//!     .await?;
//!
//! let client = runtime.client();
//! let id = client.submit(Resize { image: "cat.png".into(), width: 640 }).await?;
//! assert_eq!(client.wait(&id).await?, "cat.png@640w (run 1)");
//! runtime.shutdown(Duration::from_secs(30)).await?;
//! # Ok::<(), taskgate_worker::Error>(()) }).unwrap();
//! ```
//!
//! Guarantees: a handler runs **at least once** per execution (a crash, a lost lease or a
//! shutdown that ran out of time runs it again; use [`JobContext::id`] as the idempotency key
//! of side effects). Metrics names are in [`metric_names`]; every execution runs in a
//! `taskgate.task` tracing span with its kind, queue, ID and attempt.
//!
//! **Blocking handlers.** A handler is a future polled on one of the tokio runtime's threads.
//! A handler that blocks that thread — `std::thread::sleep`, blocking file or network I/O, a
//! long computation with no `.await` — holds it until it returns: its own heartbeats stop (a
//! block longer than the lease TTL loses the lease and the task runs again elsewhere), its
//! cancellation token goes unseen, and [`Runtime::shutdown`] can neither cancel nor drop it,
//! so shutdown waits for it however short the grace and the stop timeout (its result is then
//! written, and the [`ShutdownReport`] counts it as finished after the grace). Run blocking
//! work with `tokio::task::spawn_blocking(..).await` and keep the handler itself async:
//!
//! ```
//! # use taskgate_worker::{JobContext, JobError};
//! async fn checksum(path: String, _ctx: JobContext) -> Result<u64, JobError> {
//!     let bytes = tokio::task::spawn_blocking(move || std::fs::read(path)).await??;
//!     Ok(bytes.iter().map(|b| u64::from(*b)).sum())
//! }
//! ```

mod ahead;
mod claim;
mod client;
mod completer;
mod config;
mod context;
pub mod duration;
mod error;
mod execute;
mod handler;
mod inner;
mod job;
mod obs;
#[cfg(feature = "cron")]
mod periodic;
mod running;
mod runtime;
mod shutdown;

pub use client::{Client, Group, QueueStats, WAIT_POLL};
pub use config::{CompleterConfig, Config, QueueConfig, DEFAULT_PREFETCH};
pub use context::JobContext;
pub use error::{Error, FailureKind, JobError, Result};
pub use handler::Stepped;
pub use job::{Job, JobId, SubmitOptions, DEFAULT_MAX_RETRY};
pub use obs::names as metric_names;
#[cfg(feature = "cron")]
pub use periodic::Periodic;
pub use runtime::{shutdown_signal, Builder, Runtime, DEFAULT_STOP_TIMEOUT};
pub use shutdown::ShutdownReport;
pub use taskgate::Step;
