//! Degradation (extensions §E14): the same claim+ack (16 claimers, one queue, batch 1 and
//! 100) on a fresh table and on one that retains 1,000,000 finished rows, on PostgreSQL and
//! SQLite. The rows are seeded with one bulk `INSERT … SELECT` through the harness's pool
//! (copies of a task the broker enqueued); `cargo bench -- --test` seeds 10,000.

use std::time::Instant;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use benches::backend::{Backend, Bed, Env};
use benches::drive::{self, Spec, Stop};
use benches::{criterion_test_mode, fill};

mod support;

fn degradation(c: &mut Criterion) {
    let rt = support::runtime();
    let env = Env::from_env();
    env.announce_skips();
    let rows = if criterion_test_mode() { 10_000 } else { 1_000_000 };
    for backend in
        env.available().into_iter().filter(|b| matches!(b, Backend::Postgres | Backend::Sqlite))
    {
        group(c, &rt, &env, backend, rows);
    }
}

fn group(c: &mut Criterion, rt: &tokio::runtime::Runtime, env: &Env, backend: Backend, rows: u64) {
    let fresh = support::or_die(rt.block_on(Bed::open(env, backend, 16)), "open");
    let loaded = support::or_die(rt.block_on(Bed::open(env, backend, 16)), "open");
    let start = Instant::now();
    support::or_die(rt.block_on(fill::finished(&loaded, rows)), "seed");
    support::or_die(rt.block_on(fill::refresh_statistics(&loaded)), "analyze");
    eprintln!("taskgate benches: {backend}: seeded {rows} finished rows in {:?}", start.elapsed());
    let mut group = c.benchmark_group(format!("degradation/{backend}"));
    support::configure(&mut group, criterion_test_mode());
    group.throughput(Throughput::Elements(1));
    for batch in [1, 100] {
        let spec = Spec { queues: 1, claimers: 16, batch };
        for (name, bed) in [("fresh", &fresh), ("retained", &loaded)] {
            group.bench_function(BenchmarkId::new(name, format!("b{batch}")), |b| {
                b.to_async(rt).iter_custom(|iters| drain(bed, spec, iters));
            });
        }
    }
    group.finish();
    support::or_die(rt.block_on(fresh.close()), "close");
    support::or_die(rt.block_on(loaded.close()), "close");
}

/// Fills `iters` tasks (untimed), then times claim+ack of all of them.
async fn drain(bed: &Bed, spec: Spec, iters: u64) -> std::time::Duration {
    let per_lane = drive::split(spec, iters);
    support::or_die(drive::fill_lanes(bed, &per_lane).await, "fill");
    let out = drive::broker_run(bed, spec, &per_lane, Stop::Drained(support::SAFETY)).await;
    let out = support::or_die(out, "claim+ack");
    support::check_jobs(out.jobs, iters);
    out.elapsed
}

criterion_group!(benches, degradation);
criterion_main!(benches);
