//! Claim contention (extensions §E14): N claimers (1, 4, 16, 64) on one queue and spread
//! over 8 queues, claim+ack of no-op tasks from a pre-filled backlog, batch 1 / 10 / 100
//! (`dequeue_many` + `ack_many`), on every available backend. One iteration is one job, so
//! criterion's throughput is jobs/s.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};

use benches::backend::{Backend, Bed, Env};
use benches::criterion_test_mode;
use benches::drive::{self, Spec, Stop};

mod support;

const CLAIMERS: [usize; 4] = [1, 4, 16, 64];

fn claim(c: &mut Criterion) {
    let rt = support::runtime();
    let env = Env::from_env();
    env.announce_skips();
    for backend in env.available() {
        for queues in [1, 8] {
            for batch in [1, 10, 100] {
                group(c, &rt, &env, backend, queues, batch);
            }
        }
    }
}

/// One criterion group: a backend, a layout and a batch size, over the claimer counts, on
/// one bed whose finished rows are pruned after every claimer count.
fn group(
    c: &mut Criterion,
    rt: &tokio::runtime::Runtime,
    env: &Env,
    backend: Backend,
    queues: usize,
    batch: usize,
) {
    let bed = support::or_die(rt.block_on(Bed::open(env, backend, 64)), "open");
    let mut group = c.benchmark_group(format!("claim/{backend}/q{queues}/b{batch}"));
    support::configure(&mut group, criterion_test_mode());
    group.throughput(Throughput::Elements(1));
    for claimers in CLAIMERS {
        let spec = Spec { queues, claimers, batch };
        group.bench_function(BenchmarkId::from_parameter(claimers), |b| {
            b.to_async(rt).iter_custom(|iters| drain(&bed, spec, iters));
        });
        support::or_die(rt.block_on(support::prune(&bed)), "prune");
    }
    group.finish();
    support::or_die(rt.block_on(bed.close()), "close");
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

criterion_group!(benches, claim);
criterion_main!(benches);
