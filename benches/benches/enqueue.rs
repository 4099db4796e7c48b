//! Enqueue throughput (extensions §E14): one producer calling `enqueue`, 16 concurrent
//! producers, and `enqueue_many` of 100, on every available backend. One iteration is one
//! stored task.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use benches::backend::{Backend, Bed, Env};
use benches::criterion_test_mode;
use benches::produce::{self, Producers};

mod support;

fn enqueue(c: &mut Criterion) {
    let rt = support::runtime();
    let env = Env::from_env();
    env.announce_skips();
    for backend in env.available() {
        group(c, &rt, &env, backend);
    }
}

fn group(c: &mut Criterion, rt: &tokio::runtime::Runtime, env: &Env, backend: Backend) {
    let bed = support::or_die(rt.block_on(Bed::open(env, backend, 16)), "open");
    let mut group = c.benchmark_group(format!("enqueue/{backend}"));
    support::configure(&mut group, criterion_test_mode());
    group.throughput(Throughput::Elements(1));
    for scenario in Producers::MATRIX {
        let id =
            BenchmarkId::from_parameter(format!("p{}/b{}", scenario.producers, scenario.batch));
        group.bench_function(id, |b| {
            b.to_async(rt).iter_custom(|iters| timed(&bed, scenario, iters));
        });
    }
    group.finish();
    support::or_die(rt.block_on(bed.close()), "close");
}

/// Stores at least `iters` tasks; returns the time scaled to exactly `iters`.
async fn timed(bed: &Bed, scenario: Producers, iters: u64) -> Duration {
    let per_call = u64::try_from(scenario.producers * scenario.batch).unwrap_or(1).max(1);
    let calls_each = iters.div_ceil(per_call).max(1);
    let out = produce::enqueue(&bed.broker, "enq", scenario, calls_each, support::SAFETY).await;
    let out = support::or_die(out, "enqueue");
    out.elapsed.mul_f64(iters as f64 / out.jobs.max(1) as f64)
}

criterion_group!(benches, enqueue);
criterion_main!(benches);
