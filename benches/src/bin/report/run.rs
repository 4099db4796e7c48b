//! Running the report's matrix on one backend: claim cells (broker and raw ceiling), enqueue,
//! pickup, the end-to-end pipeline, degradation, the worker runtime and the soak, each on fresh
//! storage.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use benches::backend::{Backend, Bed, Env};
use benches::drive::{self, Outcome, Spec, Stop};
use benches::facts::{database_settings, write_transactions};
use benches::produce::{self, Producers};
use benches::report::{
    ClaimCell, Database, DegradeCell, EnqueueCell, Measured, PgbenchCell, PickupCell, PipelineCell,
    Report, RuntimeCell, RuntimePickupCell, RuntimeWork, SoakCell,
};
use benches::runtime::{RtOutcome, RtSpec, QUEUE as RT_QUEUE};
use benches::soak::{self as soaking, Sample, SoakSpec};
use benches::stats::{percentiles, rate};
use benches::{fill, pickup, raw, Result};

use crate::plan::Plan;

/// The current time as `YYYY-MM-DD HH:MM UTC`.
pub(crate) fn utc_now() -> String {
    let now = taskgate::Timestamp::now().to_string(); // 2026-01-01T00:00:00.000Z
    let (date, time) = now.split_once('T').unwrap_or((&now, ""));
    format!("{date} {} UTC", time.get(..5).unwrap_or(time))
}

fn sessions(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Everything the report measures on `backend`; failures are recorded, never fatal.
pub(crate) async fn backend(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    settings(env, backend, report).await;
    claims(env, backend, plan, report).await;
    if backend == Backend::Postgres {
        pgbench_cells(env, report).await;
    }
    enqueues(env, backend, plan, report).await;
    pickups(env, backend, plan, report).await;
    pipelines(env, backend, plan, report).await;
    if matches!(backend, Backend::Postgres | Backend::Sqlite) {
        degradations(env, backend, plan, report).await;
    }
    runtime(env, backend, plan, report).await;
    if backend.is_sql() {
        soak_cell(env, backend, plan, report).await;
    }
}

/// The `--soak-only` run on `backend`: its settings, then the soak.
pub(crate) async fn soak(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    settings(env, backend, report).await;
    soak_cell(env, backend, plan, report).await;
}

/// The soak of `plan` on fresh storage, printing every sample as it is taken.
async fn soak_cell(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    let spec = SoakSpec::new(plan.soak_rate, plan.soak);
    eprintln!("  {backend} soak: {}", spec.label());
    let progress = |s: &Sample| {
        eprintln!(
            "  {backend} soak {:>6.0} s: {} done/s, p99 {} ms, backlog {}, rows {}, size {}, dead {}",
            s.at.as_secs_f64(),
            rate(s.rate),
            benches::stats::ms(s.pickup.p99),
            s.backlog,
            s.rows,
            s.size_bytes.map_or("—".to_owned(), |b| b.to_string()),
            s.dead_rows.map_or("—".to_owned(), |d| d.to_string())
        );
    };
    let samples = async {
        let bed = Bed::open(env, backend, sessions(spec.claimers + 2)).await?;
        let samples = soaking::run(&bed, spec, progress).await;
        let closed = bed.close().await;
        let samples = samples?;
        closed?;
        Ok::<_, benches::BoxError>(samples)
    }
    .await
    .map_err(|e| e.to_string());
    if let Err(e) = &samples {
        eprintln!("  {backend} soak: failed: {e}");
    }
    report.soaks.push(SoakCell { backend, spec, samples });
}

/// The `--runtime-only` run on `backend`: the broker's reference cells (one queue, 16
/// claimers, batch 1 and 100, each with its raw ceiling), then the worker runtime's rows.
pub(crate) async fn runtime_only(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    settings(env, backend, report).await;
    let mut last = HashMap::new();
    for batch in [1, 100] {
        let spec = Spec { queues: 1, claimers: 16, batch };
        let broker = measure(env, backend, plan, spec, false, &mut last).await;
        let raw = match backend.is_sql() {
            true => Some(measure(env, backend, plan, spec, true, &mut last).await),
            false => None,
        };
        report.claims.push(ClaimCell { backend, spec, broker, raw });
    }
    runtime(env, backend, plan, report).await;
}

async fn settings(env: &Env, backend: Backend, report: &mut Report) {
    eprintln!("report: {backend} (load {:.2})", benches::facts::load_average());
    match Bed::open(env, backend, 1).await {
        Ok(bed) => {
            let settings = database_settings(&bed)
                .await
                .unwrap_or_else(|e| vec![("error".into(), e.to_string())]);
            report.databases.push(Database { backend, settings });
            let _ = bed.close().await;
        }
        Err(e) => report.skipped.push(format!("{backend}: could not open: {e}")),
    }
}

async fn claims(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    let mut last: HashMap<(usize, usize, bool), f64> = HashMap::new();
    for &queues in &plan.layouts {
        for &batch in &plan.batches {
            for &claimers in &plan.claimers {
                let spec = Spec { queues, claimers, batch };
                let with_raw = backend.is_sql() && plan.raw_layouts.contains(&queues);
                let broker = measure(env, backend, plan, spec, false, &mut last).await;
                let raw = if with_raw {
                    Some(measure(env, backend, plan, spec, true, &mut last).await)
                } else {
                    None
                };
                report.claims.push(ClaimCell { backend, spec, broker, raw });
            }
        }
    }
}

async fn measure(
    env: &Env,
    backend: Backend,
    plan: &Plan,
    spec: Spec,
    raw: bool,
    last: &mut HashMap<(usize, usize, bool), f64>,
) -> std::result::Result<Measured, String> {
    let key = (spec.queues, spec.batch, raw);
    // The previous claimer count's rate, doubled (more claimers may go faster), else a guess.
    let guess = Plan::guess(backend, spec.batch);
    let expected = last.get(&key).map_or(guess, |r| guess.max(r * 2.0));
    let total = plan.backlog(backend, expected, spec.claimers, spec.batch);
    let result = claim_cell(env, backend, plan, spec, total, raw).await.map_err(|e| e.to_string());
    let what = if raw { "raw" } else { "broker" };
    match &result {
        Ok(m) => {
            last.insert(key, m.rate);
            eprintln!(
                "  {backend} {what} {}: {} jobs/s{}",
                spec.label(),
                rate(m.rate),
                if m.exhausted { " (drained)" } else { "" }
            );
        }
        Err(e) => eprintln!("  {backend} {what} {}: failed: {e}", spec.label()),
    }
    result
}

/// One claim cell on fresh storage: fill, warm up, measure, count commits.
async fn claim_cell(
    env: &Env,
    backend: Backend,
    plan: &Plan,
    spec: Spec,
    total: u64,
    raw: bool,
) -> Result<Measured> {
    let bed = Bed::open(env, backend, sessions(spec.claimers)).await?;
    let measured = claim_on(&bed, plan, spec, total, raw).await;
    let closed = bed.close().await;
    let measured = measured?;
    closed?;
    Ok(measured)
}

async fn pass(bed: &Bed, spec: Spec, per_lane: &[u64], stop: Stop, raw: bool) -> Result<Outcome> {
    if raw {
        raw::raw_run(bed, spec, per_lane, stop).await
    } else {
        drive::broker_run(bed, spec, per_lane, stop).await
    }
}

pub(crate) async fn claim_on(
    bed: &Bed,
    plan: &Plan,
    spec: Spec,
    total: u64,
    raw: bool,
) -> Result<Measured> {
    let warm =
        drive::split(spec, u64::try_from(spec.claimers * spec.batch * 2).unwrap_or(u64::MAX));
    let per_lane = drive::split(spec, total);
    let filled: Vec<u64> = warm.iter().zip(&per_lane).map(|(a, b)| a + b).collect();
    drive::fill_lanes(bed, &filled).await?;
    let warmed = pass(bed, spec, &warm, Stop::Drained(Duration::from_secs(30)), raw).await?;
    let left = filled.iter().sum::<u64>().saturating_sub(warmed.jobs);
    settle(bed, spec, left).await?;
    let retries = bed.tx_retries();
    let before = write_transactions(bed).await?;
    let out = pass(bed, spec, &per_lane, Stop::Deadline(plan.cell), raw).await?;
    let after = write_transactions(bed).await?;
    let jobs = out.jobs.max(1) as f64;
    let (commits_per_job, commits_measured) = match (before, after) {
        (Some(b), Some(a)) => (Some(a.saturating_sub(b) as f64 / jobs), true),
        _ if bed.backend == Backend::Memory => (None, false),
        _ => (Some((out.claims + out.completions) as f64 / jobs), false),
    };
    Ok(Measured {
        rate: out.rate(),
        jobs: out.jobs,
        commits_per_job,
        commits_measured,
        retries: bed.tx_retries() - retries,
        exhausted: out.exhausted,
    })
}

/// Runs one claim cell and prints what it did (for profiling one workload).
pub(crate) async fn single(
    env: &Env,
    backend: Backend,
    plan: &Plan,
    spec: Spec,
    raw: bool,
) -> Result<()> {
    let total = plan.backlog(backend, Plan::guess(backend, spec.batch), spec.claimers, spec.batch);
    let m = claim_cell(env, backend, plan, spec, total, raw).await?;
    let warm = spec.claimers * spec.batch * 2;
    println!(
        "{backend} {} raw={raw}: {} jobs/s, {} jobs measured (+{warm} warm-up), commits/job {:?}, retries {}",
        spec.label(),
        rate(m.rate),
        m.jobs,
        m.commits_per_job,
        m.retries
    );
    Ok(())
}

/// The cells of issue 13's "batch paths near the raw ceiling" rows, for `--pairs` without a
/// list: PostgreSQL 16 claimers at batch 1 and 10, 4 at batch 100; SQLite 1 claimer at batch
/// 100; MySQL/MariaDB 4 claimers at batch 100.
pub(crate) const ISSUE_PAIRS: &str =
    "postgres,1,16,1;postgres,1,16,10;postgres,1,4,100;sqlite,1,1,100;mysql,1,4,100";

/// `--pairs`: each cell's broker and raw ceiling back to back, `rounds` times alternating
/// (broker, raw, broker, raw, …) so load from other processes hits both alike; prints every
/// run and, per cell, the median of the rounds' broker ÷ raw ratios.
pub(crate) async fn pairs(
    env: &Env,
    plan: &Plan,
    cells: &[(Backend, Spec)],
    rounds: usize,
) -> Result<()> {
    let mut summary = Vec::new();
    for &(backend, spec) in cells {
        if !env.available().contains(&backend) {
            eprintln!("report: {backend} is not available here, {} skipped", spec.label());
            continue;
        }
        let mut ratios = Vec::new();
        let (mut brokers, mut raws) = (Vec::new(), Vec::new());
        let with_pgbench =
            backend == Backend::Postgres && spec.queues == 1 && benches::pgbench::available();
        let (mut pgbenches, mut pg_ratios) = (Vec::new(), Vec::new());
        for round in 0..rounds.max(1) {
            let mut rates = [0.0; 2];
            for (slot, raw) in [false, true].into_iter().enumerate() {
                let guess = Plan::guess(backend, spec.batch);
                let total = plan.backlog(backend, guess, spec.claimers, spec.batch);
                let m = claim_cell(env, backend, plan, spec, total, raw).await?;
                let what = if raw { "raw   " } else { "broker" };
                eprintln!(
                    "  round {round}: {backend} {} {what} {} jobs/s{}",
                    spec.label(),
                    rate(m.rate),
                    if m.exhausted { " (drained)" } else { "" }
                );
                rates[slot] = m.rate;
            }
            brokers.push(rates[0]);
            raws.push(rates[1]);
            if rates[1] > 0.0 {
                ratios.push(rates[0] / rates[1]);
            }
            if with_pgbench {
                let (pg, drained) = pgbench_cell(env, spec).await?;
                eprintln!(
                    "  round {round}: {backend} {} pgbench {} jobs/s{}",
                    spec.label(),
                    rate(pg),
                    if drained { " (drained)" } else { "" }
                );
                pgbenches.push(pg);
                if pg > 0.0 {
                    pg_ratios.push(rates[0] / pg);
                }
            }
        }
        let pgbench = with_pgbench.then(|| (median(&mut pgbenches), median(&mut pg_ratios)));
        let (broker, raw, ratio) = (median(&mut brokers), median(&mut raws), median(&mut ratios));
        summary.push((backend, spec, broker, raw, ratio, pgbench));
    }
    println!(
        "| Cell | broker | raw | broker ÷ raw | pgbench | broker ÷ pgbench |  (medians of rounds)"
    );
    println!("|---|---:|---:|---:|---:|---:|");
    for (backend, spec, broker, raw, ratio, pgbench) in summary {
        let (pg, pg_ratio) = match pgbench {
            Some((pg, r)) => (rate(pg), format!("{:.0} %", r * 100.0)),
            None => ("—".to_owned(), "—".to_owned()),
        };
        println!(
            "| {backend} {} | {} | {} | {:.0} % | {pg} | {pg_ratio} |",
            spec.label(),
            rate(broker),
            rate(raw),
            ratio * 100.0
        );
    }
    Ok(())
}

fn median(values: &mut [f64]) -> f64 {
    values.sort_by(f64::total_cmp);
    match values.len() {
        0 => 0.0,
        n if n % 2 == 1 => values[n / 2],
        n => (values[n / 2 - 1] + values[n / 2]) / 2.0,
    }
}

/// Issue 13's PostgreSQL cells (16 claimers × batch 1 and 10, 4 × batch 100), whose raw
/// ceiling the issue measured with pgbench.
pub(crate) const PGBENCH_CELLS: [Spec; 3] = [
    Spec { queues: 1, claimers: 16, batch: 1 },
    Spec { queues: 1, claimers: 16, batch: 10 },
    Spec { queues: 1, claimers: 4, batch: 100 },
];

/// Seconds pgbench measures (it takes whole seconds).
const PGBENCH_SECS: u32 = 2;

/// pgbench's raw ceiling of [`PGBENCH_CELLS`] beside the claim matrix; says why when pgbench
/// is not installed.
async fn pgbench_cells(env: &Env, report: &mut Report) {
    let installed = benches::pgbench::available();
    for spec in PGBENCH_CELLS {
        let rate = match installed {
            true => pgbench_cell(env, spec).await.map_err(|e| e.to_string()),
            false => Err("pgbench is not installed".to_owned()),
        };
        eprintln!("  postgres pgbench {}: {rate:?}", spec.label());
        report.pgbench.push(PgbenchCell { spec, rate });
    }
}

/// pgbench's raw ceiling of `spec` (one queue) on fresh PostgreSQL storage.
async fn pgbench_cell(env: &Env, spec: Spec) -> Result<(f64, bool)> {
    let url = env.pg_url.as_deref().ok_or("TASKGATE_PG_URL is not set")?;
    let bed = Bed::open(env, Backend::Postgres, 1).await?;
    let result = async {
        // Twice what the guessed rate needs (pgbench's warm-up takes a few batches more).
        let guess = Plan::guess(Backend::Postgres, spec.batch) * f64::from(PGBENCH_SECS) * 2.0;
        let floor = u64::try_from(spec.claimers * spec.batch * 20).unwrap_or(u64::MAX);
        let total = benches::stats::whole(guess.min(400_000.0)).max(floor);
        fill::backlog(&bed, &Spec::queue(0), total).await?;
        benches::pgbench::claim_ack(&bed, url, spec, PGBENCH_SECS).await
    }
    .await;
    let closed = bed.close().await;
    let result = result?;
    closed?;
    Ok(result)
}

/// Waits until the lanes hold `expected` ready tasks again: claims that were in flight when
/// the warm-up drained were dropped, and the broker hands their tasks back to `pending` in
/// the background (cancel safety, extensions §E0); the measured pass starts after that.
async fn settle(bed: &Bed, spec: Spec, expected: u64) -> Result<()> {
    let start = Instant::now();
    loop {
        let mut ready = 0;
        for lane in 0..spec.lanes() {
            ready += bed.broker.queue_len(&Spec::queue(lane)).await?;
        }
        if ready >= expected {
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(30) {
            return Err(
                format!("only {ready} of {expected} tasks ready 30 s after the warm-up").into()
            );
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

async fn enqueues(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    for scenario in Producers::MATRIX {
        let result = async {
            let bed = Bed::open(env, backend, sessions(scenario.producers)).await?;
            let out = produce::enqueue(&bed.broker, "enq", scenario, u64::MAX, plan.cell).await;
            bed.close().await?;
            Ok::<f64, benches::BoxError>(out?.rate())
        }
        .await
        .map_err(|e| e.to_string());
        eprintln!("  {backend} {}: {:?}", scenario.label(), result.as_ref().map(|v| rate(*v)));
        report.enqueues.push(EnqueueCell { backend, scenario, rate: result });
    }
}

async fn pickups(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    for cross_handle in [false, true] {
        let polls = cross_handle && matches!(backend, Backend::Sqlite | Backend::MySql);
        let samples = if polls { plan.pickup_samples.1 } else { plan.pickup_samples.0 };
        let result = async {
            let bed = Bed::open(env, backend, 2).await?;
            let claimer =
                if cross_handle { bed.second_handle().await? } else { bed.broker.clone() };
            let got = pickup::pickups(
                bed.broker.clone(),
                claimer.clone(),
                samples,
                Duration::from_millis(20),
            )
            .await;
            if cross_handle {
                claimer.close().await?;
            }
            bed.close().await?;
            Ok::<_, benches::BoxError>(percentiles(&got?))
        }
        .await
        .map_err(|e| e.to_string());
        eprintln!("  {backend} pickup (second handle: {cross_handle}): {result:?}");
        report.pickups.push(PickupCell { backend, cross_handle, latency: result });
    }
}

/// The end-to-end pipelines on `backend` (16 and 2 claimers).
pub(crate) async fn pipelines(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    for claimers in [16, 2] {
        pipeline(env, backend, plan, claimers, report).await;
    }
}

async fn pipeline(env: &Env, backend: Backend, plan: &Plan, claimers: usize, report: &mut Report) {
    let (producers, batch) = (2, 100);
    let result = async {
        let bed = Bed::open(env, backend, sessions(producers + claimers)).await?;
        let out = produce::pipeline(&bed.broker, producers, claimers, batch, plan.cell * 2).await;
        bed.close().await?;
        Ok::<f64, benches::BoxError>(out?.rate())
    }
    .await
    .map_err(|e| e.to_string());
    eprintln!("  {backend} pipeline c{claimers}: {:?}", result.as_ref().map(|v| rate(*v)));
    report.pipelines.push(PipelineCell { backend, producers, claimers, batch, rate: result });
}

async fn degradations(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    let specs =
        [Spec { queues: 1, claimers: 16, batch: 1 }, Spec { queues: 1, claimers: 16, batch: 100 }];
    let seeded = seeded_bed(env, backend, plan.retained).await;
    let (bed, seed_secs) = match seeded {
        Ok(pair) => pair,
        Err(e) => {
            for spec in specs {
                report.degradations.push(failed_degrade(backend, spec, plan, &e.to_string()));
            }
            return;
        }
    };
    for spec in specs {
        let total =
            plan.backlog(backend, Plan::guess(backend, spec.batch), spec.claimers, spec.batch);
        // Alternating twice and keeping each side's best damps the load of a shared machine.
        let (mut fresh, mut loaded) = (Err(String::new()), Err(String::new()));
        for _ in 0..2 {
            let f = claim_cell(env, backend, plan, spec, total, false).await.map(|m| m.rate);
            fresh = best(fresh, f.map_err(|e| e.to_string()));
            let l = claim_on(&bed, plan, spec, total, false).await.map(|m| m.rate);
            loaded = best(loaded, l.map_err(|e| e.to_string()));
        }
        eprintln!("  {backend} degradation {}: fresh {fresh:?}, retained {loaded:?}", spec.label());
        report.degradations.push(DegradeCell {
            backend,
            spec,
            retained: plan.retained,
            seed_secs,
            fresh,
            loaded,
        });
    }
    let _ = bed.close().await;
}

/// The higher of two rates; an error only when both failed (the later error).
fn best(
    a: std::result::Result<f64, String>,
    b: std::result::Result<f64, String>,
) -> std::result::Result<f64, String> {
    match (a, b) {
        (Ok(x), Ok(y)) => Ok(x.max(y)),
        (Ok(x), Err(_)) | (Err(_), Ok(x)) => Ok(x),
        (Err(_), Err(e)) => Err(e),
    }
}

fn failed_degrade(backend: Backend, spec: Spec, plan: &Plan, why: &str) -> DegradeCell {
    let err = Err(why.to_owned());
    DegradeCell {
        backend,
        spec,
        retained: plan.retained,
        seed_secs: 0.0,
        fresh: err.clone(),
        loaded: err,
    }
}

/// A bed sized for 16 claimers holding `rows` finished rows, with fresh statistics.
async fn seeded_bed(env: &Env, backend: Backend, rows: u64) -> Result<(Bed, f64)> {
    let bed = Bed::open(env, backend, 16).await?;
    let start = Instant::now();
    fill::finished(&bed, rows).await?;
    fill::refresh_statistics(&bed).await?;
    let secs = start.elapsed().as_secs_f64();
    eprintln!("  {backend}: seeded {} finished rows in {secs:.1} s", rate(rows as f64));
    Ok((bed, secs))
}

/// The worker runtime on `backend`: the drain matrix, the steady state and the pickups.
async fn runtime(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    for spec in RtSpec::MATRIX {
        let outcome = runtime_drain(env, backend, plan, spec).await.map_err(|e| e.to_string());
        let what = match &outcome {
            Ok(o) => format!(
                "{} jobs/s ({} jobs in {:.2} s{})",
                rate(o.rate()),
                o.jobs,
                o.elapsed.as_secs_f64(),
                if o.finished { "" } else { ", stopped at the deadline" }
            ),
            Err(e) => format!("failed: {e}"),
        };
        eprintln!("  {backend} runtime drain {}: {what}", spec.label());
        let work = RuntimeWork::Drain(plan.runtime_backlog);
        report.runtime.push(RuntimeCell { backend, spec, work, outcome });
    }
    let spec = RtSpec { workers: 16, completer: true };
    let scenario = Producers { producers: 2, batch: 100 };
    let outcome = async {
        let bed = Bed::open(env, backend, sessions(spec.workers + 4)).await?;
        let out = benches::runtime::steady(
            &bed.broker,
            spec,
            scenario,
            u64::MAX,
            plan.runtime_window,
            false,
        )
        .await;
        bed.close().await?;
        out
    }
    .await
    .map_err(|e| e.to_string());
    eprintln!(
        "  {backend} runtime steady {}: {:?}",
        spec.label(),
        outcome.as_ref().map(|o| (rate(o.rate()), o.produced))
    );
    report.runtime.push(RuntimeCell {
        backend,
        spec,
        work: RuntimeWork::Steady(scenario),
        outcome,
    });
    runtime_pickups(env, backend, plan, report).await;
}

/// The worker runtime's pickup latency on `backend` (an idle worker; the producer on the
/// worker's handle, then on a second handle): `--pickups-only` runs only these rows.
pub(crate) async fn runtime_pickups(env: &Env, backend: Backend, plan: &Plan, report: &mut Report) {
    for cross_handle in [false, true] {
        let polls = cross_handle && matches!(backend, Backend::Sqlite | Backend::MySql);
        let samples = if polls { plan.pickup_samples.1 } else { plan.pickup_samples.0 };
        let latency = async {
            let bed = Bed::open(env, backend, 2).await?;
            let worker = if cross_handle { bed.second_handle().await? } else { bed.broker.clone() };
            let got = benches::runtime::pickups(
                bed.broker.clone(),
                worker.clone(),
                samples,
                Duration::from_millis(20),
            )
            .await;
            if cross_handle {
                worker.close().await?;
            }
            bed.close().await?;
            Ok::<_, benches::BoxError>(percentiles(&got?))
        }
        .await
        .map_err(|e| e.to_string());
        record_pickup(report, RuntimePickupCell { backend, cross_handle, raw: false, latency });
    }
    if backend == Backend::Postgres {
        let latency = async {
            let bed = Bed::open(env, backend, 3).await?;
            let got = benches::raw::pg_pickups(
                &bed,
                benches::runtime::QUEUE,
                plan.pickup_samples.0,
                Duration::from_millis(20),
            )
            .await;
            bed.close().await?;
            Ok::<_, benches::BoxError>(percentiles(&got?))
        }
        .await
        .map_err(|e| e.to_string());
        record_pickup(
            report,
            RuntimePickupCell { backend, cross_handle: true, raw: true, latency },
        );
    }
}

/// Prints one runtime pickup row and adds it to the report.
fn record_pickup(report: &mut Report, cell: RuntimePickupCell) {
    let what = match (cell.raw, cell.cross_handle) {
        (true, _) => "raw pickup ceiling",
        (false, true) => "runtime pickup (second handle)",
        (false, false) => "runtime pickup (worker's handle)",
    };
    eprintln!("  {} {what}: {:?}", cell.backend, cell.latency);
    report.runtime_pickups.push(cell);
}

/// One drain on fresh storage: an untimed warm-up drain (pool connections, prepared
/// statements), then the pre-filled backlog, then a check that the storage agrees.
async fn runtime_drain(
    env: &Env,
    backend: Backend,
    plan: &Plan,
    spec: RtSpec,
) -> Result<RtOutcome> {
    let bed = Bed::open(env, backend, sessions(spec.workers + 4)).await?;
    let out = drain_on(&bed, plan, spec).await;
    let closed = bed.close().await;
    let out = out?;
    closed?;
    Ok(out)
}

/// [`runtime_drain`] on an open bed, with one runtime of `spec` per handle of the bed
/// ([`Bed::handles`]; the topology rows' handles on several servers).
pub(crate) async fn drain_on(bed: &Bed, plan: &Plan, spec: RtSpec) -> Result<RtOutcome> {
    let handles = bed.handles();
    async {
        let warm = u64::try_from(spec.workers * 2 * handles.len()).unwrap_or(2);
        fill::backlog(bed, RT_QUEUE, warm).await?;
        let warmed =
            benches::runtime::drain_on(&handles, spec, warm, Duration::from_secs(30)).await?;
        if !warmed.finished {
            return Err(format!("the warm-up ran {} of {warm} tasks in 30 s", warmed.jobs).into());
        }
        fill::backlog(bed, RT_QUEUE, plan.runtime_backlog).await?;
        let out =
            benches::runtime::drain_on(&handles, spec, plan.runtime_backlog, plan.runtime_limit)
                .await?;
        if out.finished {
            let left = bed.broker.queue_len(RT_QUEUE).await?;
            let completed = bed
                .broker
                .counts()
                .await?
                .get(fill::TASK_TYPE)
                .and_then(|by| by.get(&taskgate::Status::Completed))
                .copied()
                .unwrap_or(0);
            let expected = warm + plan.runtime_backlog;
            if left != 0 || completed != expected {
                return Err(format!(
                    "after the drain {left} tasks wait and {completed} completed (expected 0 and \
                     {expected})"
                )
                .into());
            }
        }
        Ok::<_, benches::BoxError>(out)
    }
    .await
}
