//! `portable-adapter`: taskgate in the long-horizon protocol of the independent PostgreSQL
//! job-queue benchmark (hardbyte/postgresql-job-queue-benchmarking, CONTRIBUTING_ADAPTERS.md;
//! issue 42). `cargo run -p benches --release --bin portable-adapter` with the harness's
//! environment (`DATABASE_URL`, `SCENARIO=long_horizon`, `PRODUCER_MODE`, `PRODUCER_RATE`,
//! `TARGET_DEPTH`, `WORKER_COUNT`, `JOB_PAYLOAD_BYTES`, `JOB_WORK_MS`, `SAMPLE_EVERY_S`, and
//! `PRODUCER_BATCH_MAX` / `PRODUCER_BATCH_MS`).
//!
//! It uses taskgate as an application does: a `PgBroker` from the URL, the worker runtime
//! (`taskgate_worker::Runtime`) with one queue of `WORKER_COUNT` workers and a typed job whose
//! handler records its pickup latency (the producer's wall-clock time stamped in the payload →
//! handler start) and sleeps `JOB_WORK_MS`; the producer submits through the runtime's `Client`
//! (`Client::group`, one `enqueue_many` per batch), paced on real elapsed time; the depth is
//! `queue_len`. stdout carries the JSONL records only: a descriptor at start, then at every
//! wall-clock multiple of `SAMPLE_EVERY_S` one record per metric. stderr carries the logs.
//! SIGTERM (or SIGINT) stops the producer and the sampler, shuts the runtime down with a 2 s
//! grace and exits 0, within 5 s.

use std::io::Write;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use benches::portable::{self, ProducerMode, RollingWindow, Settings, Tick};
use serde::{Deserialize, Serialize};
use taskgate::{Broker, BrokerOptions};
use taskgate_postgres::PgOptions;
use taskgate_worker::{Client, Config, Job, QueueConfig, Runtime, SubmitOptions};

/// The benchmark's job: its sequence number, when the producer built it (unix µs), and
/// padding up to `JOB_PAYLOAD_BYTES`.
#[derive(Serialize, Deserialize)]
struct LongHorizonJob {
    seq: u64,
    produced_at_us: i64,
    padding: String,
}

impl Job for LongHorizonJob {
    const KIND: &'static str = portable::KIND;
    const QUEUE: Option<&'static str> = Some(portable::QUEUE);
    type Output = ();
}

/// What the producer, the handlers and the sampler share.
struct Shared {
    stop: AtomicBool,
    enqueued: AtomicU64,
    completed: AtomicU64,
    depth: AtomicU64,
    claims: Mutex<RollingWindow>,
}

fn now_us() -> i64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).unwrap_or_default();
    i64::try_from(since.as_micros()).unwrap_or(i64::MAX)
}

fn now_ms() -> i64 {
    now_us().div_euclid(1_000)
}

/// JSON records on stdout, one per line, written and flushed together (the harness tails the
/// stream line by line; a tick's records are never split by a shutdown).
fn emit(records: &[serde_json::Value]) {
    let text: String = records.iter().map(|r| format!("{r}\n")).collect();
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn main() -> ExitCode {
    let settings = match Settings::from_vars(|name| std::env::var(name).ok()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("portable-adapter: {e}");
            return ExitCode::from(2);
        }
    };
    let rt = match benches::runtime() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("portable-adapter: {e}");
            return ExitCode::FAILURE;
        }
    };
    let outcome = rt.block_on(run(settings));
    // Whatever is still running (a claim waiting on a dead server) is not waited for.
    rt.shutdown_timeout(Duration::from_millis(500));
    match outcome {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("portable-adapter: {e}");
            ExitCode::FAILURE
        }
    }
}

async fn run(settings: Settings) -> benches::Result<()> {
    let started_ms = now_ms();
    let pool = settings.workers.saturating_add(4);
    let broker = PgOptions::from_url(&settings.database_url)?.pool_size(pool).connect().await?;
    broker.init(BrokerOptions::default()).await?;
    // What `init` made, read back from the catalog (so the descriptor shows the schema as it
    // is, and the harness's drift check against adapter.json means something).
    let prefix = format!("{}%", taskgate_postgres::DEFAULT_PREFIX.replace('_', "\\_"));
    let tables: Vec<String> = sqlx::query_scalar(
        "SELECT table_schema::text || '.' || table_name::text FROM information_schema.tables \
         WHERE table_schema = current_schema() AND table_type = 'BASE TABLE' \
         AND table_name LIKE $1 ORDER BY table_name",
    )
    .bind(&prefix)
    .fetch_all(broker.pool())
    .await?;
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT schemaname::text || '.' || indexname::text FROM pg_indexes \
         WHERE schemaname = current_schema() AND tablename = $1 ORDER BY indexname",
    )
    .bind(format!("{}tasks", taskgate_postgres::DEFAULT_PREFIX))
    .fetch_all(broker.pool())
    .await?;
    let schema_version = taskgate_postgres::MIGRATIONS
        .last()
        .map_or_else(|| "0".to_owned(), |m| format!("{:04}_{}", m.version, m.name));
    emit(&[portable::descriptor(&settings, &tables, &indexes, &schema_version, started_ms)]);
    eprintln!(
        "portable-adapter: {} workers, {:?} producer at {}/s (depth target {}), samples every {} s",
        settings.workers,
        settings.producer_mode,
        settings.producer_rate,
        settings.target_depth,
        settings.sample_every_s
    );

    let shared = Arc::new(Shared {
        stop: AtomicBool::new(false),
        enqueued: AtomicU64::new(0),
        completed: AtomicU64::new(0),
        depth: AtomicU64::new(0),
        claims: Mutex::new(RollingWindow::new(portable::LATENCY_WINDOW)),
    });
    let handler_shared = shared.clone();
    let work = settings.work;
    let runtime = Runtime::builder(Arc::new(broker))
        .config(Config::new().queue(portable::QUEUE, QueueConfig::workers(settings.workers)))
        .register(move |job: LongHorizonJob, _ctx| {
            let shared = handler_shared.clone();
            async move {
                let now = now_us();
                let waited = Duration::from_micros(
                    u64::try_from(now.saturating_sub(job.produced_at_us)).unwrap_or(0),
                );
                if let Ok(mut window) = shared.claims.lock() {
                    window.record(now.div_euclid(1_000), waited);
                }
                if !work.is_zero() {
                    tokio::time::sleep(work).await;
                }
                shared.completed.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
        })
        .start()
        .await?;
    let client = runtime.client();

    let producer = tokio::spawn(produce(client.clone(), settings.clone(), shared.clone()));
    let depth = tokio::spawn(poll_depth(client.clone(), shared.clone()));
    let sampler = tokio::spawn(sample(settings.sample_every_s, shared.clone()));

    taskgate_worker::shutdown_signal().await;
    eprintln!("portable-adapter: shutdown signal received");
    shared.stop.store(true, Ordering::SeqCst);
    sampler.abort();
    producer.abort();
    depth.abort();
    let _ = std::io::stdout().lock().flush();
    match tokio::time::timeout(Duration::from_secs(3), runtime.shutdown(Duration::from_secs(2)))
        .await
    {
        Ok(Ok(report)) => eprintln!("portable-adapter: {report}"),
        Ok(Err(e)) => eprintln!("portable-adapter: shutdown: {e}"),
        Err(_) => eprintln!("portable-adapter: shutdown took more than 3 s; leaving"),
    }
    Ok(())
}

/// The producer: `fixed` credits `PRODUCER_RATE` on real elapsed time every
/// `PRODUCER_BATCH_MS` and submits what is owed (at most `PRODUCER_BATCH_MAX`) in one group;
/// `depth-target` tops the queue up to `TARGET_DEPTH`.
async fn produce(client: Client, settings: Settings, shared: Arc<Shared>) {
    let padding = "x".repeat(settings.payload_bytes.saturating_sub(48));
    let mut seq = 0u64;
    let mut credit = 0.0;
    let mut last = Instant::now();
    let mut next = tokio::time::Instant::now();
    while !shared.stop.load(Ordering::Relaxed) {
        let n = match settings.producer_mode {
            ProducerMode::Fixed => {
                next = (next + settings.batch_every).max(tokio::time::Instant::now());
                tokio::time::sleep_until(next).await;
                let now = Instant::now();
                let elapsed = now.saturating_duration_since(last);
                last = now;
                portable::take_credit(
                    &mut credit,
                    settings.producer_rate,
                    elapsed,
                    settings.batch_max,
                )
            }
            ProducerMode::DepthTarget => {
                let depth = shared.depth.load(Ordering::Relaxed);
                if depth >= settings.target_depth {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
                let missing = usize::try_from(settings.target_depth - depth).unwrap_or(usize::MAX);
                missing.min(settings.batch_max)
            }
        };
        if n == 0 {
            continue;
        }
        let mut group = client.group();
        let produced_at_us = now_us();
        for _ in 0..n {
            let job = LongHorizonJob { seq, produced_at_us, padding: padding.clone() };
            group.add(job, SubmitOptions::new());
            seq += 1;
        }
        match group.submit().await {
            Ok(stored) => {
                let stored = u64::try_from(stored.len()).unwrap_or(u64::MAX);
                shared.enqueued.fetch_add(stored, Ordering::Relaxed);
                if settings.producer_mode == ProducerMode::DepthTarget {
                    shared.depth.fetch_add(stored, Ordering::Relaxed);
                }
            }
            Err(e) => {
                eprintln!("portable-adapter: enqueue of {n} failed: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Reads the queue's depth (ready jobs not yet claimed) every 200 ms.
async fn poll_depth(client: Client, shared: Arc<Shared>) {
    while !shared.stop.load(Ordering::Relaxed) {
        match client.broker().queue_len(portable::QUEUE).await {
            Ok(n) => shared.depth.store(n, Ordering::Relaxed),
            Err(e) => eprintln!("portable-adapter: queue depth: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// At every wall-clock multiple of `every_s` seconds: the claim percentiles of the last 30 s,
/// the enqueue and completion rates since the previous tick, and the depth. Each record's `t`
/// is its tick (the boundary itself, so every system's samples share one timebase); a tick
/// that comes late is still taken, at once, and labelled with its boundary, so the ticks of a
/// run are consecutive multiples whatever the load.
async fn sample(every_s: u64, shared: Arc<Shared>) {
    let step = i64::try_from(every_s).unwrap_or(1).saturating_mul(1_000);
    let mut last = Instant::now();
    let mut last_enqueued = shared.enqueued.load(Ordering::Relaxed);
    let mut last_completed = shared.completed.load(Ordering::Relaxed);
    let mut tick = portable::next_tick_ms(now_ms(), every_s);
    loop {
        let wait = u64::try_from(tick - now_ms()).unwrap_or(0);
        tokio::time::sleep(Duration::from_millis(wait)).await;
        if shared.stop.load(Ordering::Relaxed) {
            return;
        }
        let at = Instant::now();
        let secs = at.saturating_duration_since(last).as_secs_f64().max(0.001);
        last = at;
        let enqueued = shared.enqueued.load(Ordering::Relaxed);
        let completed = shared.completed.load(Ordering::Relaxed);
        let claim = shared
            .claims
            .lock()
            .ok()
            .and_then(|w| w.percentiles(now_ms()))
            .map(|(p50, p95, p99, _)| (p50, p95, p99));
        let sample = Tick {
            claim,
            enqueue_rate: enqueued.saturating_sub(last_enqueued) as f64 / secs,
            completion_rate: completed.saturating_sub(last_completed) as f64 / secs,
            queue_depth: shared.depth.load(Ordering::Relaxed) as f64,
        };
        last_enqueued = enqueued;
        last_completed = completed;
        emit(&portable::samples(tick, every_s, &sample));
        tick += step;
    }
}
