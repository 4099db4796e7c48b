//! The pieces of the `portable-adapter` binary (issue 42) that are worth testing on their own:
//! its settings from the environment, the rolling 30-second latency window with bounded
//! memory, the clock-aligned tick times and the JSONL records of the long-horizon protocol of
//! hardbyte/postgresql-job-queue-benchmarking (CONTRIBUTING_ADAPTERS.md).
//!
//! The binary (`src/bin/portable-adapter.rs`) wires them to taskgate's worker runtime; the
//! protocol test (`tests/portable_adapter.rs`) runs it against PostgreSQL.

use std::collections::HashMap;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde_json::{json, Value};

/// The system name the adapter reports (`system` of every record, `adapter.json`).
pub const SYSTEM: &str = "taskgate";
/// The queue the adapter's jobs go to.
pub const QUEUE: &str = "long_horizon";
/// The job kind.
pub const KIND: &str = "long_horizon_job";
/// The claim-latency window the protocol asks for.
pub const LATENCY_WINDOW: Duration = Duration::from_secs(30);
/// The metrics every tick carries (the claim percentiles once a job started in the window).
pub const METRICS: [&str; 6] = [
    "claim_p50_ms",
    "claim_p95_ms",
    "claim_p99_ms",
    "enqueue_rate",
    "completion_rate",
    "queue_depth",
];

/// How the producer offers load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProducerMode {
    /// `PRODUCER_RATE` jobs per second, credited on real elapsed time.
    Fixed,
    /// Keep the queue at `TARGET_DEPTH` ready jobs.
    DepthTarget,
}

/// The adapter's settings, read from the environment the harness sets.
#[derive(Clone, Debug, PartialEq)]
pub struct Settings {
    /// `DATABASE_URL`.
    pub database_url: String,
    /// `SCENARIO` (only `long_horizon`).
    pub scenario: String,
    /// `PRODUCER_MODE`: `fixed` (default) or `depth-target`.
    pub producer_mode: ProducerMode,
    /// `PRODUCER_RATE`, jobs per second (default 200).
    pub producer_rate: f64,
    /// `PRODUCER_BATCH_MAX`: most jobs per `enqueue_many` (default 128).
    pub batch_max: usize,
    /// `PRODUCER_BATCH_MS`: the producer's tick (default 25 ms).
    pub batch_every: Duration,
    /// `TARGET_DEPTH` (default 1000).
    pub target_depth: u64,
    /// `WORKER_COUNT` (default 8).
    pub workers: u32,
    /// `JOB_PAYLOAD_BYTES` (default 256).
    pub payload_bytes: usize,
    /// `JOB_WORK_MS` (default 1).
    pub work: Duration,
    /// `SAMPLE_EVERY_S` (default 5).
    pub sample_every_s: u64,
}

impl Settings {
    /// Reads the settings through `var` (the process environment in the binary); an error
    /// names the variable and the value it could not use.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        fn num<T: std::str::FromStr>(
            var: &impl Fn(&str) -> Option<String>,
            name: &str,
            default: T,
        ) -> Result<T, String> {
            match var(name).map(|v| v.trim().to_owned()).filter(|v| !v.is_empty()) {
                None => Ok(default),
                Some(v) => v.parse().map_err(|_| format!("{name}={v:?} is not a valid number")),
            }
        }
        let database_url = var("DATABASE_URL").ok_or("DATABASE_URL is not set")?;
        let scenario = var("SCENARIO").unwrap_or_else(|| "long_horizon".to_owned());
        if scenario != "long_horizon" {
            return Err(format!("SCENARIO={scenario:?}: this adapter runs long_horizon only"));
        }
        let producer_mode = match var("PRODUCER_MODE").as_deref().unwrap_or("fixed") {
            "fixed" => ProducerMode::Fixed,
            "depth-target" => ProducerMode::DepthTarget,
            other => {
                return Err(format!("PRODUCER_MODE={other:?}: expected fixed or depth-target"))
            }
        };
        let settings = Settings {
            database_url,
            scenario,
            producer_mode,
            producer_rate: num(&var, "PRODUCER_RATE", 200.0)?,
            batch_max: num(&var, "PRODUCER_BATCH_MAX", 128)?,
            batch_every: Duration::from_millis(num(&var, "PRODUCER_BATCH_MS", 25)?),
            target_depth: num(&var, "TARGET_DEPTH", 1_000)?,
            workers: num(&var, "WORKER_COUNT", 8)?,
            payload_bytes: num(&var, "JOB_PAYLOAD_BYTES", 256)?,
            work: Duration::from_millis(num(&var, "JOB_WORK_MS", 1)?),
            sample_every_s: num(&var, "SAMPLE_EVERY_S", 5)?,
        };
        let bad = |name: &str, why: &str| Err(format!("{name}: {why}"));
        if !settings.producer_rate.is_finite() || settings.producer_rate < 0.0 {
            return bad("PRODUCER_RATE", "must be a number ≥ 0");
        }
        if settings.batch_max == 0 {
            return bad("PRODUCER_BATCH_MAX", "must be at least 1");
        }
        if settings.batch_every.is_zero() {
            return bad("PRODUCER_BATCH_MS", "must be at least 1");
        }
        if settings.workers == 0 {
            return bad("WORKER_COUNT", "must be at least 1");
        }
        if settings.sample_every_s == 0 {
            return bad("SAMPLE_EVERY_S", "must be at least 1");
        }
        Ok(settings)
    }

    /// The database's name (the URL's path, without its query).
    pub fn db_name(&self) -> String {
        let path = self.database_url.rsplit('/').next().unwrap_or_default();
        path.split('?').next().unwrap_or_default().to_owned()
    }
}

/// Claim latencies of the last [`LATENCY_WINDOW`] in bounded memory: one HDR histogram (3
/// significant figures, 1 µs to 10 minutes, larger values clamped) per wall-clock second, in a
/// ring of window + 1 slots. A slot is cleared when its second comes round again, so memory
/// stays the same whatever the rate and however long the run.
pub struct RollingWindow {
    slots: Vec<(i64, Histogram<u32>)>,
    window_s: i64,
}

/// The largest latency a histogram holds (10 minutes in µs); larger ones count as this.
const MAX_LATENCY_US: u64 = 600_000_000;

impl RollingWindow {
    /// An empty window of `window` (whole seconds, at least 1).
    pub fn new(window: Duration) -> RollingWindow {
        let window_s = i64::try_from(window.as_secs().max(1)).unwrap_or(i64::MAX / 2);
        let slots = (0..=window_s)
            .map(|_| {
                // Constant bounds that hdrhistogram accepts (1 ≤ low, 2 × low ≤ high, 3 figures).
                let hist = Histogram::new_with_bounds(1, MAX_LATENCY_US, 3)
                    .expect("1 µs to 10 minutes at 3 significant figures is a valid histogram");
                (i64::MIN, hist)
            })
            .collect();
        RollingWindow { slots, window_s }
    }

    fn slot(&mut self, second: i64) -> &mut (i64, Histogram<u32>) {
        let len = i64::try_from(self.slots.len()).unwrap_or(1);
        let i = usize::try_from(second.rem_euclid(len)).unwrap_or(0);
        &mut self.slots[i]
    }

    /// Records one latency observed at `at_ms` (unix milliseconds).
    pub fn record(&mut self, at_ms: i64, latency: Duration) {
        let second = at_ms.div_euclid(1_000);
        let slot = self.slot(second);
        if slot.0 != second {
            slot.1.reset();
            slot.0 = second;
        }
        let us = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX).clamp(1, MAX_LATENCY_US);
        slot.1.saturating_record(us);
    }

    /// p50, p95, p99 in milliseconds and the count, over the seconds of the window ending at
    /// `now_ms` (the current second included); `None` when nothing was recorded in it.
    pub fn percentiles(&self, now_ms: i64) -> Option<(f64, f64, f64, u64)> {
        let now_s = now_ms.div_euclid(1_000);
        let mut merged: Option<Histogram<u32>> = None;
        for (second, hist) in &self.slots {
            if *second > now_s - self.window_s && *second <= now_s && !hist.is_empty() {
                match &mut merged {
                    None => merged = Some(hist.clone()),
                    Some(m) => {
                        let _ = m.add(hist);
                    }
                }
            }
        }
        let m = merged?;
        let ms = |q: f64| m.value_at_quantile(q) as f64 / 1_000.0;
        Some((ms(0.50), ms(0.95), ms(0.99), m.len()))
    }
}

/// The first tick at or after `now_ms`: the next multiple of `every_s` seconds of the wall
/// clock (strictly after `now_ms`), in unix milliseconds.
pub fn next_tick_ms(now_ms: i64, every_s: u64) -> i64 {
    let every = i64::try_from(every_s.max(1)).unwrap_or(1) * 1_000;
    (now_ms.div_euclid(every) + 1) * every
}

/// `2026-04-17T09:00:10.000Z` for unix milliseconds.
pub fn iso_ms(ms: i64) -> String {
    taskgate::Timestamp::from_millis(ms).to_string()
}

/// The startup descriptor record.
pub fn descriptor(
    settings: &Settings,
    event_tables: &[String],
    event_indexes: &[String],
    schema_version: &str,
    started_ms: i64,
) -> Value {
    json!({
        "kind": "descriptor",
        "system": SYSTEM,
        "event_tables": event_tables,
        "event_indexes": event_indexes,
        "extensions": [],
        "version": env!("CARGO_PKG_VERSION"),
        "schema_version": schema_version,
        "db_name": settings.db_name(),
        "started_at": iso_ms(started_ms),
    })
}

/// What one tick saw.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Tick {
    /// Claim latency percentiles (ms) of the last 30 s, when any job started in them.
    pub claim: Option<(f64, f64, f64)>,
    /// Jobs enqueued per second since the previous tick.
    pub enqueue_rate: f64,
    /// Jobs completed per second since the previous tick.
    pub completion_rate: f64,
    /// Ready jobs not yet claimed, now.
    pub queue_depth: f64,
}

/// The sample records of one tick at `t_ms`, one per metric, in [`METRICS`] order.
pub fn samples(t_ms: i64, every_s: u64, tick: &Tick) -> Vec<Value> {
    let t = iso_ms(t_ms);
    let window = LATENCY_WINDOW.as_secs_f64();
    let every = every_s as f64;
    let mut rows: Vec<(&str, f64, f64)> = Vec::with_capacity(6);
    if let Some((p50, p95, p99)) = tick.claim {
        rows.extend([("claim_p50_ms", p50, window), ("claim_p95_ms", p95, window)]);
        rows.push(("claim_p99_ms", p99, window));
    }
    rows.extend([
        ("enqueue_rate", tick.enqueue_rate, every),
        ("completion_rate", tick.completion_rate, every),
        ("queue_depth", tick.queue_depth, 0.0),
    ]);
    rows.into_iter()
        .map(|(metric, value, window_s)| {
            json!({
                "t": t,
                "system": SYSTEM,
                "kind": "adapter",
                "subject_kind": "adapter",
                "subject": "",
                "metric": metric,
                "value": value,
                "window_s": window_s,
            })
        })
        .collect()
}

/// Jobs a fixed-rate producer may send now: `credit` grows by `rate` × the real time elapsed
/// since the last call (`elapsed`), whole jobs are taken out (at most `max`) and the fraction
/// stays for the next call (CONTRIBUTING_ADAPTERS.md, "Producer pacing").
pub fn take_credit(credit: &mut f64, rate: f64, elapsed: Duration, max: usize) -> usize {
    *credit += rate * elapsed.as_secs_f64();
    let whole = credit.floor().max(0.0);
    let take = usize::try_from(crate::stats::whole(whole)).unwrap_or(max).min(max);
    *credit -= take as f64;
    // A producer that fell far behind does not burst forever: at most one batch stays owed.
    *credit = credit.min(max as f64);
    take
}

/// Counts of the records a run printed, by metric (for the protocol test and the doc).
pub fn count_metrics<'a>(records: impl IntoIterator<Item = &'a Value>) -> HashMap<String, usize> {
    let mut out = HashMap::new();
    for r in records {
        if let Some(m) = r.get("metric").and_then(Value::as_str) {
            *out.entry(m.to_owned()).or_insert(0) += 1;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> =
            list.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        move |name| map.get(name).cloned()
    }

    #[test]
    fn settings_have_the_protocol_defaults_and_name_bad_values() {
        let s =
            Settings::from_vars(vars(&[("DATABASE_URL", "postgres://h/db_bench?x=1")])).unwrap();
        assert_eq!(s.producer_mode, ProducerMode::Fixed);
        assert_eq!((s.sample_every_s, s.workers, s.payload_bytes), (5, 8, 256));
        assert_eq!(s.db_name(), "db_bench");
        let e = Settings::from_vars(vars(&[("DATABASE_URL", "u"), ("WORKER_COUNT", "x")]));
        assert!(e.unwrap_err().contains("WORKER_COUNT=\"x\""));
        let e = Settings::from_vars(vars(&[("DATABASE_URL", "u"), ("SCENARIO", "chaos")]));
        assert!(e.unwrap_err().contains("long_horizon only"));
        let e = Settings::from_vars(vars(&[("DATABASE_URL", "u"), ("PRODUCER_MODE", "burst")]));
        assert!(e.unwrap_err().contains("PRODUCER_MODE"));
        assert!(Settings::from_vars(vars(&[])).unwrap_err().contains("DATABASE_URL"));
        let d = Settings::from_vars(vars(&[
            ("DATABASE_URL", "u"),
            ("PRODUCER_MODE", "depth-target"),
            ("TARGET_DEPTH", "50"),
        ]))
        .unwrap();
        assert_eq!((d.producer_mode, d.target_depth), (ProducerMode::DepthTarget, 50));
    }

    #[test]
    fn the_window_forgets_what_is_older_than_thirty_seconds() {
        let mut w = RollingWindow::new(LATENCY_WINDOW);
        let t0 = 1_000_000_000;
        for i in 0..100 {
            w.record(t0, Duration::from_millis(100 + i));
        }
        w.record(t0 + 10_000, Duration::from_millis(1));
        let (p50, _, p99, n) = w.percentiles(t0 + 10_500).unwrap();
        assert_eq!(n, 101);
        assert!((148.0..151.0).contains(&p50), "{p50}");
        assert!((197.0..200.0).contains(&p99), "{p99}");
        // 30 s later the first second has left the window; only the 1 ms sample is left.
        let (p50, _, _, n) = w.percentiles(t0 + 30_500).unwrap();
        assert_eq!((n, p50), (1, 1.0));
        assert!(w.percentiles(t0 + 41_000).is_none());
        // A slot reused 31 s later starts empty.
        w.record(t0 + 31_000, Duration::from_millis(7));
        let (_, _, _, n) = w.percentiles(t0 + 31_000).unwrap();
        assert_eq!(n, 2);
    }

    #[test]
    fn ticks_fall_on_wall_clock_multiples() {
        assert_eq!(next_tick_ms(12_345, 5), 15_000);
        assert_eq!(next_tick_ms(15_000, 5), 20_000);
        assert_eq!(next_tick_ms(999, 1), 1_000);
        assert_eq!(iso_ms(15_000), "1970-01-01T00:00:15.000Z");
    }

    #[test]
    fn credit_follows_real_time_and_keeps_the_fraction() {
        let mut credit = 0.0;
        assert_eq!(take_credit(&mut credit, 200.0, Duration::from_millis(25), 128), 5);
        assert_eq!(take_credit(&mut credit, 200.0, Duration::from_millis(12), 128), 2);
        assert!((credit - 0.4).abs() < 1e-9);
        // A stall of 2 s owes 400 jobs: one batch now, at most one batch carried.
        assert_eq!(take_credit(&mut credit, 200.0, Duration::from_secs(2), 128), 128);
        assert!(credit <= 128.0);
    }

    #[test]
    fn a_tick_prints_one_record_per_metric() {
        let tick = Tick {
            claim: Some((1.5, 3.0, 4.25)),
            enqueue_rate: 200.0,
            completion_rate: 199.5,
            queue_depth: 3.0,
        };
        let rows = samples(15_000, 5, &tick);
        let names: Vec<&str> = rows.iter().map(|r| r["metric"].as_str().unwrap()).collect();
        assert_eq!(names, METRICS);
        assert_eq!(rows[2]["value"], 4.25);
        assert_eq!(rows[2]["window_s"], 30.0);
        assert_eq!(rows[3]["window_s"], 5.0);
        assert_eq!(rows[5]["t"], "1970-01-01T00:00:15.000Z");
        let without = samples(15_000, 5, &Tick { claim: None, ..tick });
        assert_eq!(count_metrics(&without).len(), 3, "no claim percentiles without a claim");
    }
}
