//! Sustained load without bloat (issue 13): a producer enqueues at a fixed rate while claimers
//! claim+ack with the claim driver of [`crate::drive`] (`dequeue_many` + `ack_many`, as the
//! end-to-end pipeline row does), an operator prunes finished tasks older than a short
//! retention every few seconds, and a sampler records, per window, the pickup latency, the
//! achieved rate, the backlog and the storage's size.
//!
//! Latency is **pickup**: from the start of the `enqueue_many` call that stored a task to the
//! return of the `dequeue_many` call that claimed it (each task carries its enqueue instant in
//! its payload, on the harness's monotonic clock). It grows when claims get slower or the
//! claimers fall behind, which is what bloat would do.
//!
//! [`Summary`] condenses a run; [`Bounded`] is the target: see [`SIZE_GROWTH_LIMIT`] and
//! [`FLATNESS_LIMIT`].

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use taskgate::{Broker, PruneRequest, Task};

use crate::backend::{Backend, Bed, RawPool};
use crate::drive::{self, BrokerWorker, Claimed, Spec, Stop, Worker};
use crate::fill::TASK_TYPE;
use crate::stats::{percentiles, Percentiles};
use crate::Result;

/// The producers' default rate, jobs per second.
pub const RATE: u32 = 500;
/// Size bounded: the largest size in the last third of the run is at most this many times the
/// largest size in its middle third. A size growing linearly from zero scores 1.5 (the end of
/// the run against two thirds of it), so the limit sits well below that; a size that levels off
/// scores about 1.
pub const SIZE_GROWTH_LIMIT: f64 = 1.2;
/// Latency flat: the last window's p99 pickup is at most this many times the first window's.
pub const FLATNESS_LIMIT: f64 = 2.0;
/// How often the producer enqueues what is due (one `enqueue_many` per tick).
const TICK: Duration = Duration::from_millis(20);
/// The most tasks one `enqueue_many` of the producer carries (when it has fallen behind).
const MOST_PER_CALL: u64 = 1_000;

/// One soak run's settings.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SoakSpec {
    /// Tasks the producer enqueues per second.
    pub rate: u32,
    /// Concurrent claimers (`dequeue_many` + `ack_many` loops).
    pub claimers: usize,
    /// Most tasks per claim and per `ack_many`.
    pub batch: usize,
    /// How long the load runs.
    pub duration: Duration,
    /// The sampling window.
    pub sample_every: Duration,
    /// How often the operator prunes.
    pub prune_every: Duration,
    /// Finished tasks older than this are pruned.
    pub retention: Duration,
}

impl SoakSpec {
    /// The report's soak of `duration` at `rate`: 4 claimers at batch 10; windows and prunes
    /// every `duration ÷ 60` within 1–5 s; retention `duration ÷ 10` within 2–60 s (so the
    /// table reaches its steady size in the first tenth of the run, and a 5-minute run keeps
    /// 30 s of finished tasks).
    pub fn new(rate: u32, duration: Duration) -> SoakSpec {
        let every = (duration / 60).clamp(Duration::from_secs(1), Duration::from_secs(5));
        SoakSpec {
            rate,
            claimers: 4,
            batch: 10,
            duration,
            sample_every: every,
            prune_every: every,
            retention: (duration / 10).clamp(Duration::from_secs(2), Duration::from_secs(60)),
        }
    }

    /// `500/s for 300 s, 4 claimers × batch 10, prune every 5 s keeping 30 s, a sample every 5 s`.
    pub fn label(&self) -> String {
        format!(
            "{}/s for {} s, {} claimers × batch {}, prune every {} s keeping {} s, a sample every {} s",
            self.rate,
            self.duration.as_secs(),
            self.claimers,
            self.batch,
            self.prune_every.as_secs_f64(),
            self.retention.as_secs_f64(),
            self.sample_every.as_secs_f64()
        )
    }
}

/// One sampling window.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Sample {
    /// The window's end, from the start of the run.
    pub at: Duration,
    /// Tasks enqueued in the window.
    pub produced: u64,
    /// Tasks claimed and acked in the window.
    pub completed: u64,
    /// Completed per second over the window.
    pub rate: f64,
    /// Pickup latency (enqueue call start → claim returned) of the tasks claimed in the window.
    pub pickup: Percentiles,
    /// Ready tasks waiting at the window's end (`queue_len`).
    pub backlog: u64,
    /// Tasks the storage holds, every status (`counts`).
    pub rows: u64,
    /// The storage's size in bytes ([`size_measure`] says what), when measured.
    pub size_bytes: Option<u64>,
    /// PostgreSQL: the tasks table's `n_dead_tup`.
    pub dead_rows: Option<u64>,
    /// Tasks pruned in the window.
    pub pruned: u64,
}

/// What [`Sample::size_bytes`] measures on `backend`, for the page.
pub fn size_measure(backend: Backend) -> &'static str {
    match backend {
        Backend::Memory => "— (rows held only)",
        Backend::Sqlite => "database file + WAL file",
        Backend::Postgres => "`pg_total_relation_size` summed over the bed's tables",
        Backend::MySql => {
            "`information_schema.TABLES` data_length + index_length of the bed's tables"
        }
    }
}

/// The run's shared tallies: what the producer, claimers and pruner did since the last sample.
struct Recorder {
    start: Instant,
    produced: AtomicU64,
    pruned: AtomicU64,
    window: Mutex<Window>,
}

#[derive(Default)]
struct Window {
    completed: u64,
    pickups: Vec<Duration>,
}

impl Recorder {
    fn new() -> Arc<Recorder> {
        Arc::new(Recorder {
            start: Instant::now(),
            produced: AtomicU64::new(0),
            pruned: AtomicU64::new(0),
            window: Mutex::new(Window::default()),
        })
    }

    fn stamp(&self) -> Vec<u8> {
        let micros = u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX);
        micros.to_le_bytes().to_vec()
    }

    /// Pickup latency of `task` claimed now.
    fn pickup(&self, task: &Task) -> Option<Duration> {
        let bytes: [u8; 8] = task.payload.as_deref()?.try_into().ok()?;
        let enqueued = Duration::from_micros(u64::from_le_bytes(bytes));
        Some(self.start.elapsed().saturating_sub(enqueued))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Window> {
        self.window.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Takes the window's tallies, leaving them empty.
    fn take(&self) -> (u64, u64, Window) {
        let produced = self.produced.swap(0, Ordering::Relaxed);
        let pruned = self.pruned.swap(0, Ordering::Relaxed);
        (produced, pruned, std::mem::take(&mut *self.lock()))
    }
}

/// A claimer of the soak: the broker's [`BrokerWorker`], recording each claimed task's pickup
/// latency and each completion.
struct SoakWorker {
    broker: Arc<dyn Broker>,
    inner: BrokerWorker,
    recorder: Arc<Recorder>,
}

#[async_trait]
impl Worker for SoakWorker {
    async fn claim(&mut self, queue: &str, max: usize) -> Result<Vec<Claimed>> {
        let tasks = self.broker.dequeue_many(&[queue], max).await?;
        let latencies: Vec<Duration> =
            tasks.iter().filter_map(|t| self.recorder.pickup(t)).collect();
        self.recorder.lock().pickups.extend(latencies);
        Ok(tasks.into_iter().map(|t| Claimed { id: t.id, token: t.lease_token }).collect())
    }

    async fn complete(&mut self, claimed: Vec<Claimed>) -> Result<()> {
        let n = u64::try_from(claimed.len()).unwrap_or(u64::MAX);
        self.inner.complete(claimed).await?;
        self.recorder.lock().completed += n;
        Ok(())
    }

    fn may_wait(&self) -> bool {
        true
    }
}

/// Runs the soak of `spec` on `bed`; `on_sample` sees every sample as it is taken (progress).
pub async fn run(
    bed: &Bed,
    spec: SoakSpec,
    mut on_sample: impl FnMut(&Sample),
) -> Result<Vec<Sample>> {
    let recorder = Recorder::new();
    let queue = Spec::queue(0);
    let producer = tokio::spawn(produce(bed.broker.clone(), queue, spec, recorder.clone()));
    let pruner = tokio::spawn(prune(bed.broker.clone(), spec, recorder.clone()));
    let drive_spec = Spec { queues: 1, claimers: spec.claimers, batch: spec.batch };
    let claimers = drive::run(drive_spec, &[u64::MAX / 2], Stop::Deadline(spec.duration), |_| {
        Ok(SoakWorker {
            broker: bed.broker.clone(),
            inner: BrokerWorker::new(bed.broker.clone()),
            recorder: recorder.clone(),
        })
    });
    let sampler = sample(bed, spec, &recorder, &mut on_sample);
    let (claimed, samples) = tokio::join!(claimers, sampler);
    let produced = producer.await?;
    let pruned = pruner.await?;
    claimed?;
    produced?;
    pruned?;
    samples
}

/// Enqueues what is due every [`TICK`] so that `spec.rate` tasks per second are stored on
/// average, each stamped with its call's start.
async fn produce(
    broker: Arc<dyn Broker>,
    queue: String,
    spec: SoakSpec,
    recorder: Arc<Recorder>,
) -> Result<()> {
    let mut ticks = tokio::time::interval(TICK);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut produced = 0u64;
    loop {
        ticks.tick().await;
        let elapsed = recorder.start.elapsed();
        if elapsed >= spec.duration {
            return Ok(());
        }
        let due = crate::stats::whole(f64::from(spec.rate) * elapsed.as_secs_f64());
        let n = due.saturating_sub(produced).min(MOST_PER_CALL);
        if n == 0 {
            continue;
        }
        let stamp = recorder.stamp();
        let tasks: Vec<Task> =
            (0..n).map(|_| Task::new(TASK_TYPE, &queue).with_payload(stamp.clone())).collect();
        broker.enqueue_many(&tasks).await?;
        produced += n;
        recorder.produced.fetch_add(n, Ordering::Relaxed);
    }
}

/// The operator: every `prune_every`, prunes finished tasks that finished more than
/// `retention` ago on the broker's clock.
async fn prune(broker: Arc<dyn Broker>, spec: SoakSpec, recorder: Arc<Recorder>) -> Result<()> {
    let start = tokio::time::Instant::from_std(recorder.start);
    let mut ticks = tokio::time::interval_at(start + spec.prune_every, spec.prune_every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        if ticks.tick().await.duration_since(start) >= spec.duration {
            return Ok(());
        }
        let now = broker.now().await?;
        let request = PruneRequest {
            finished_before: now.saturating_sub(spec.retention),
            ..PruneRequest::default()
        };
        let n = broker.prune(request).await?;
        recorder.pruned.fetch_add(n, Ordering::Relaxed);
    }
}

/// Takes a sample at the end of every window until the run's end.
async fn sample(
    bed: &Bed,
    spec: SoakSpec,
    recorder: &Recorder,
    on_sample: &mut impl FnMut(&Sample),
) -> Result<Vec<Sample>> {
    let start = tokio::time::Instant::from_std(recorder.start);
    let windows = (spec.duration.as_nanos() / spec.sample_every.as_nanos().max(1)).max(1);
    let mut samples = Vec::new();
    let mut last = Duration::ZERO;
    for k in 1..=u32::try_from(windows).unwrap_or(u32::MAX) {
        tokio::time::sleep_until(start + spec.sample_every * k).await;
        let at = recorder.start.elapsed();
        let (produced, pruned, window) = recorder.take();
        let secs = at.saturating_sub(last).as_secs_f64();
        last = at;
        let (size_bytes, dead_rows) = storage_size(bed).await?;
        let s = Sample {
            at,
            produced,
            completed: window.completed,
            rate: if secs > 0.0 { window.completed as f64 / secs } else { 0.0 },
            pickup: percentiles(&window.pickups),
            backlog: bed.broker.queue_len(&Spec::queue(0)).await?,
            rows: rows_held(&*bed.broker).await?,
            size_bytes,
            dead_rows,
            pruned,
        };
        on_sample(&s);
        samples.push(s);
    }
    Ok(samples)
}

/// Tasks of every type and status the storage holds.
async fn rows_held(broker: &dyn Broker) -> Result<u64> {
    Ok(broker.counts().await?.values().flat_map(|by| by.values()).sum())
}

/// The bed's storage size in bytes and, on PostgreSQL, the tasks table's dead tuples (the
/// statistics collector's figure: it lags the truth by up to a second or so, and autovacuum
/// resets it).
pub async fn storage_size(bed: &Bed) -> Result<(Option<u64>, Option<u64>)> {
    match &bed.raw {
        RawPool::None => Ok((None, None)),
        RawPool::Sqlite(_) => {
            let path = bed.sqlite_file().ok_or("sqlite bed without its file")?;
            let mut wal = path.clone().into_os_string();
            wal.push("-wal");
            let len = |p: &std::path::Path| std::fs::metadata(p).map_or(0, |m| m.len());
            Ok((Some(len(&path) + len(std::path::Path::new(&wal))), None))
        }
        RawPool::Postgres(pool) => {
            let size: i64 = sqlx::query_scalar(
                "SELECT COALESCE(SUM(pg_total_relation_size(to_regclass(t))), 0)::BIGINT \
                 FROM unnest($1::TEXT[]) AS t",
            )
            .bind(bed.tables())
            .fetch_one(pool)
            .await?;
            let dead: Option<i64> = sqlx::query_scalar(
                "SELECT n_dead_tup FROM pg_stat_user_tables WHERE relid = to_regclass($1)",
            )
            .bind(bed.tasks_table())
            .fetch_optional(pool)
            .await?;
            Ok((u64::try_from(size).ok(), dead.and_then(|d| u64::try_from(d).ok())))
        }
        RawPool::MySql(pool) => {
            let tables = bed.tables();
            let marks = vec!["?"; tables.len()].join(", ");
            let sql = format!(
                "SELECT CAST(COALESCE(SUM(data_length + index_length), 0) AS UNSIGNED) \
                 FROM information_schema.TABLES \
                 WHERE table_schema = DATABASE() AND table_name IN ({marks})"
            );
            let mut query = sqlx::query_scalar::<_, u64>(&sql);
            for t in tables {
                query = query.bind(t);
            }
            Ok((Some(query.fetch_one(pool).await?), None))
        }
    }
}

/// First, last and largest value of one measure over a run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Spread {
    /// The first sample's value.
    pub first: f64,
    /// The last sample's value.
    pub last: f64,
    /// The largest value.
    pub max: f64,
}

impl Spread {
    /// The spread of `measure` over the samples that have it; `None` when none has.
    pub fn of(samples: &[Sample], measure: impl Fn(&Sample) -> Option<f64>) -> Option<Spread> {
        let values: Vec<f64> = samples.iter().filter_map(measure).collect();
        Some(Spread {
            first: *values.first()?,
            last: *values.last()?,
            max: values.iter().copied().fold(f64::MIN, f64::max),
        })
    }
}

/// A run condensed: each measure's spread and the two checks of the target.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Summary {
    /// Samples taken.
    pub samples: usize,
    /// p50 pickup, ms.
    pub p50_ms: Option<Spread>,
    /// p99 pickup, ms.
    pub p99_ms: Option<Spread>,
    /// Completed per second.
    pub rate: Option<Spread>,
    /// Ready tasks waiting.
    pub backlog: Option<Spread>,
    /// Tasks held.
    pub rows: Option<Spread>,
    /// Storage size, bytes.
    pub size_bytes: Option<Spread>,
    /// PostgreSQL dead tuples.
    pub dead_rows: Option<Spread>,
    /// The checks.
    pub bounded: Bounded,
}

/// The soak target, precisely. The run's samples are cut by index into thirds (`n ÷ 3`
/// samples each, the remainder going to the last third); a *growth* ratio is the largest value
/// in the last third ÷ the largest in the middle third. **Bounded** holds when the size growth
/// (bytes; rows held where no byte size is measured) and, on PostgreSQL, the dead-tuple growth
/// are each ≤ [`SIZE_GROWTH_LIMIT`], and the [`flatness`] — the median window p99 pickup of
/// the last third of the windows with a pickup ÷ that of the first third (at least 1 ms) — is
/// ≤ [`FLATNESS_LIMIT`].
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Bounded {
    /// Size growth (last third's max ÷ middle third's max).
    pub size_growth: Option<f64>,
    /// Dead-tuple growth (PostgreSQL).
    pub dead_growth: Option<f64>,
    /// Last window's p99 ÷ first window's p99.
    pub flatness: Option<f64>,
}

impl Bounded {
    /// The checks of `samples`.
    pub fn of(samples: &[Sample]) -> Bounded {
        let size = if samples.iter().any(|s| s.size_bytes.is_some()) {
            growth(samples, |s| s.size_bytes.map(|v| v as f64))
        } else {
            growth(samples, |s| Some(s.rows as f64))
        };
        Bounded {
            size_growth: size,
            dead_growth: growth(samples, |s| s.dead_rows.map(|v| v as f64)),
            flatness: flatness(samples),
        }
    }

    /// `Some(true)` when every measured check holds, `None` when size or flatness is missing.
    pub fn holds(&self) -> Option<bool> {
        let size = self.size_growth?;
        let flat = self.flatness?;
        let dead = self.dead_growth.is_none_or(|d| d <= SIZE_GROWTH_LIMIT);
        Some(size <= SIZE_GROWTH_LIMIT && dead && flat <= FLATNESS_LIMIT)
    }
}

impl Summary {
    /// Condenses `samples`.
    pub fn of(samples: &[Sample]) -> Summary {
        let ms = |d: Duration| d.as_secs_f64() * 1_000.0;
        let picked = |s: &Sample| s.pickup.n > 0;
        Summary {
            samples: samples.len(),
            p50_ms: Spread::of(samples, |s| picked(s).then(|| ms(s.pickup.p50))),
            p99_ms: Spread::of(samples, |s| picked(s).then(|| ms(s.pickup.p99))),
            rate: Spread::of(samples, |s| Some(s.rate)),
            backlog: Spread::of(samples, |s| Some(s.backlog as f64)),
            rows: Spread::of(samples, |s| Some(s.rows as f64)),
            size_bytes: Spread::of(samples, |s| s.size_bytes.map(|v| v as f64)),
            dead_rows: Spread::of(samples, |s| s.dead_rows.map(|v| v as f64)),
            bounded: Bounded::of(samples),
        }
    }
}

/// The largest `measure` in the last third of `samples` ÷ the largest in the middle third
/// (`None` with fewer than 3 samples, a third without the measure, or a zero middle).
pub fn growth(samples: &[Sample], measure: impl Fn(&Sample) -> Option<f64>) -> Option<f64> {
    let third = samples.len() / 3;
    if third == 0 {
        return None;
    }
    let max = |part: &[Sample]| part.iter().filter_map(&measure).reduce(f64::max);
    let middle = max(samples.get(third..2 * third)?)?;
    let last = max(samples.get(2 * third..)?)?;
    (middle > 0.0).then(|| last / middle)
}

/// The p99 pickup at the end ÷ at the start, over windows that claimed something: the median
/// window p99 of the last third of those windows ÷ that of the first third (at least
/// [`FLATNESS_FLOOR`], so sub-millisecond starts do not turn scheduler noise into a ratio). A
/// median of windows, not one window, so a single stall on a shared machine does not decide it.
pub fn flatness(samples: &[Sample]) -> Option<f64> {
    let picked: Vec<f64> =
        samples.iter().filter(|s| s.pickup.n > 0).map(|s| s.pickup.p99.as_secs_f64()).collect();
    let third = picked.len() / 3;
    if third == 0 {
        return None;
    }
    let median = |part: &[f64]| {
        let mut v = part.to_vec();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let first = median(&picked[..third]).max(FLATNESS_FLOOR.as_secs_f64());
    let last = median(&picked[picked.len() - third..]);
    Some(last / first)
}

/// The least start p99 [`flatness`] divides by.
pub const FLATNESS_FLOOR: Duration = Duration::from_millis(1);

#[cfg(test)]
mod tests {
    use super::*;

    fn at(i: u64, size: u64, p99_ms: u64) -> Sample {
        let p99 = Duration::from_millis(p99_ms);
        Sample {
            at: Duration::from_secs(i),
            rows: size / 10,
            size_bytes: Some(size),
            pickup: Percentiles { n: 10, p50: p99 / 2, p99, max: p99 },
            ..Sample::default()
        }
    }

    #[test]
    fn growth_compares_the_last_third_with_the_middle_third() {
        let sizes = [100, 900, 200, 300, 250, 310, 300, 330];
        let samples: Vec<Sample> =
            sizes.iter().enumerate().map(|(i, s)| at(i as u64, *s, 5)).collect();
        // thirds of 2: [100, 900] [200, 300] [250, 310, 300, 330]
        let g = growth(&samples, |s| s.size_bytes.map(|v| v as f64)).unwrap();
        assert!((g - 1.1).abs() < 1e-9, "{g}");
        assert_eq!(growth(&samples[..2], |s| Some(s.rows as f64)), None);
    }

    #[test]
    fn flatness_skips_windows_without_pickups() {
        let mut samples = vec![at(0, 1, 0), at(1, 1, 4), at(2, 1, 5), at(3, 1, 6), at(4, 1, 0)];
        samples[0].pickup = Percentiles::default();
        samples[4].pickup = Percentiles::default();
        assert_eq!(flatness(&samples), Some(1.5));
        assert_eq!(flatness(&samples[..2]), None);
    }

    #[test]
    fn flatness_takes_medians_of_thirds_and_floors_the_start() {
        // One stall at the end does not decide it: last third [5, 90, 5] has median 5.
        let p99s = [4, 5, 6, 5, 5, 5, 5, 90, 5];
        let samples: Vec<Sample> =
            p99s.iter().enumerate().map(|(i, p)| at(i as u64, 1, *p)).collect();
        assert_eq!(flatness(&samples), Some(1.0));
        // A sub-millisecond start is divided as 1 ms.
        let fast: Vec<Sample> = (0..6).map(|i| at(i, 1, if i < 3 { 0 } else { 2 })).collect();
        assert_eq!(flatness(&fast), Some(2.0));
    }

    #[test]
    fn bounded_holds_only_when_every_check_holds() {
        let flat: Vec<Sample> = (0..9).map(|i| at(i, 1_000, 5)).collect();
        assert_eq!(Bounded::of(&flat).holds(), Some(true));
        let mut growing = flat.clone();
        growing[8].size_bytes = Some(1_600);
        assert_eq!(Bounded::of(&growing).holds(), Some(false));
        let mut slower = flat.clone();
        for s in &mut slower[6..] {
            s.pickup.p99 = Duration::from_millis(11);
        }
        assert_eq!(Bounded::of(&slower).holds(), Some(false));
        let mut dead = flat;
        for (i, s) in dead.iter_mut().enumerate() {
            s.dead_rows = Some(if i == 8 { 200 } else { 100 });
        }
        assert_eq!(Bounded::of(&dead).dead_growth, Some(2.0));
        assert_eq!(Bounded::of(&dead).holds(), Some(false));
        assert_eq!(Bounded::of(&[]).holds(), None);
    }

    #[test]
    fn without_byte_sizes_rows_are_the_size() {
        let samples: Vec<Sample> = (0..6)
            .map(|i| Sample { rows: 100 + i, ..at(i, 0, 5) })
            .map(|s| Sample { size_bytes: None, ..s })
            .collect();
        let g = Bounded::of(&samples).size_growth.unwrap();
        assert!((g - 105.0 / 103.0).abs() < 1e-9, "{g}");
    }

    #[test]
    fn default_windows_scale_with_the_duration() {
        let short = SoakSpec::new(RATE, Duration::from_secs(300));
        assert_eq!(short.sample_every, Duration::from_secs(5));
        assert_eq!(short.retention, Duration::from_secs(30));
        let minute = SoakSpec::new(RATE, Duration::from_secs(60));
        assert_eq!(minute.sample_every, Duration::from_secs(1));
        assert_eq!(minute.retention, Duration::from_secs(6));
        let long = SoakSpec::new(RATE, Duration::from_secs(1_800));
        assert_eq!(long.sample_every, Duration::from_secs(5));
        assert_eq!(long.retention, Duration::from_secs(60));
    }
}
