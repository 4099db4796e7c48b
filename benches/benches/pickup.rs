//! Pickup latency (extensions §E14): an idle claimer blocked in `dequeue`, one enqueue, the
//! time until the claimer holds the task; with the claimer on the same handle (in-process
//! wake-up) and on a second handle (the cross-process path: LISTEN/NOTIFY on PostgreSQL,
//! polling on SQLite and MySQL). One iteration is one pickup; the report gives p50/p99.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

use benches::backend::{Backend, Bed, Env};
use benches::{criterion_test_mode, pickup};

mod support;

fn pickups(c: &mut Criterion) {
    let rt = support::runtime();
    let env = Env::from_env();
    env.announce_skips();
    for backend in env.available() {
        group(c, &rt, &env, backend);
    }
}

fn group(c: &mut Criterion, rt: &tokio::runtime::Runtime, env: &Env, backend: Backend) {
    let bed = support::or_die(rt.block_on(Bed::open(env, backend, 2)), "open");
    let second = support::or_die(rt.block_on(bed.second_handle()), "second handle");
    let mut group = c.benchmark_group(format!("pickup/{backend}"));
    support::configure(&mut group, criterion_test_mode());
    for (name, claimer) in [("same-handle", bed.broker.clone()), ("second-handle", second.clone())]
    {
        group.bench_function(BenchmarkId::from_parameter(name), |b| {
            b.to_async(rt).iter_custom(|iters| {
                let (producer, claimer) = (bed.broker.clone(), claimer.clone());
                async move {
                    let samples = usize::try_from(iters).unwrap_or(usize::MAX);
                    let got =
                        pickup::pickups(producer, claimer, samples, Duration::from_millis(5)).await;
                    support::or_die(got, "pickup").iter().sum()
                }
            });
        });
    }
    group.finish();
    support::or_die(rt.block_on(second.close()), "close");
    support::or_die(rt.block_on(bed.close()), "close");
}

criterion_group!(benches, pickups);
criterion_main!(benches);
