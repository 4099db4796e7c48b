//! The worker runtime end to end (issue 16), on every available backend: a
//! `taskgate_worker::Runtime` with no-op handlers draining a pre-filled backlog (1 / 4 / 16
//! workers, completer on and off), keeping up with two producers (`enqueue_many` of 100), and
//! an idle worker's pickup (enqueue on a second handle → handler start). One iteration is one
//! job (one pickup), so criterion's throughput is jobs/s.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use benches::backend::{Backend, Bed, Env};
use benches::criterion_test_mode;
use benches::produce::Producers;
use benches::runtime::{self, RtSpec, QUEUE};

mod support;

fn runtime_benches(c: &mut Criterion) {
    let rt = support::runtime();
    let env = Env::from_env();
    env.announce_skips();
    for backend in env.available() {
        let bed = support::or_die(rt.block_on(Bed::open(&env, backend, 16)), "open");
        drain(c, &rt, &bed, backend);
        steady(c, &rt, &bed, backend);
        pickup(c, &rt, &bed, backend);
        support::or_die(rt.block_on(bed.close()), "close");
    }
}

/// Fills `iters` tasks (untimed), then times a runtime of each spec draining them (start to
/// the end of its graceful shutdown).
fn drain(c: &mut Criterion, rt: &tokio::runtime::Runtime, bed: &Bed, backend: Backend) {
    let mut group = c.benchmark_group(format!("runtime/{backend}/drain"));
    support::configure(&mut group, criterion_test_mode());
    group.throughput(Throughput::Elements(1));
    for spec in RtSpec::MATRIX {
        group.bench_function(BenchmarkId::from_parameter(spec.label()), |b| {
            b.to_async(rt).iter_custom(|iters| async move {
                support::or_die(benches::fill::backlog(bed, QUEUE, iters).await, "fill");
                let out = runtime::drain(&bed.broker, spec, iters, support::SAFETY).await;
                let out = support::or_die(out, "runtime drain");
                support::check_jobs(out.jobs, iters);
                out.elapsed
            });
        });
        support::or_die(rt.block_on(support::prune(bed)), "prune");
    }
    group.finish();
}

/// Two producers enqueue `iters` tasks (rounded up to whole batches of 100) while a runtime
/// with 16 workers and the completer runs them; the time until every one ran, per job.
fn steady(c: &mut Criterion, rt: &tokio::runtime::Runtime, bed: &Bed, backend: Backend) {
    let mut group = c.benchmark_group(format!("runtime/{backend}/steady"));
    support::configure(&mut group, criterion_test_mode());
    group.throughput(Throughput::Elements(1));
    let spec = RtSpec { workers: 16, completer: true };
    let scenario = Producers { producers: 2, batch: 100 };
    group.bench_function(BenchmarkId::from_parameter("2 producers b100, w16 completer"), |b| {
        b.to_async(rt).iter_custom(|iters| async move {
            let per_call = (scenario.producers * scenario.batch) as u64;
            let calls = iters.div_ceil(per_call).max(1);
            let out =
                runtime::steady(&bed.broker, spec, scenario, calls, support::SAFETY, true).await;
            let out = support::or_die(out, "runtime steady state");
            support::check_jobs(out.jobs, out.produced);
            // Per job of the `iters` asked for (more were produced to fill whole batches).
            out.elapsed.mul_f64(iters as f64 / out.produced.max(1) as f64)
        });
    });
    support::or_die(rt.block_on(support::prune(bed)), "prune");
    group.finish();
}

/// An idle one-worker runtime on a second handle; each iteration is one enqueue on the
/// bed's handle and the time until the handler starts.
fn pickup(c: &mut Criterion, rt: &tokio::runtime::Runtime, bed: &Bed, backend: Backend) {
    let second = support::or_die(rt.block_on(bed.second_handle()), "second handle");
    let mut group = c.benchmark_group(format!("runtime/{backend}/pickup"));
    support::configure(&mut group, criterion_test_mode());
    group.bench_function(BenchmarkId::from_parameter("second-handle"), |b| {
        b.to_async(rt).iter_custom(|iters| {
            let (producer, worker) = (bed.broker.clone(), second.clone());
            async move {
                let samples = usize::try_from(iters).unwrap_or(usize::MAX);
                let got =
                    runtime::pickups(producer, worker, samples, Duration::from_millis(5)).await;
                support::or_die(got, "runtime pickup").iter().sum()
            }
        });
    });
    group.finish();
    support::or_die(rt.block_on(second.close()), "close");
    support::or_die(rt.block_on(support::prune(bed)), "prune");
}

criterion_group!(benches, runtime_benches);
criterion_main!(benches);
