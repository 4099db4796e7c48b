//! Priorities (issue 12): the claim+ack rate of a backlog whose tasks carry mixed priorities
//! (21 levels, −10..=10, interleaved so consecutive IDs differ), against the same backlog at
//! one priority, on every available backend. Claims order by `(priority, run_at, id)`, so the
//! mixed backlog is claimed level by level; the row shows what that order costs. One
//! iteration is one job, so criterion's throughput is jobs/s.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use taskgate::Task;

use benches::backend::{Backend, Bed, Env};
use benches::criterion_test_mode;
use benches::drive::{self, Spec, Stop};
use benches::fill::TASK_TYPE;

mod support;

/// Concurrent claimers, as in the claim bench's middle row.
const CLAIMERS: [usize; 2] = [1, 4];
/// Tasks per claim and per ack.
const BATCH: usize = 10;

/// How the backlog's priorities are chosen.
#[derive(Clone, Copy, Debug)]
enum Mix {
    /// Every task at the default priority 0.
    Single,
    /// Task `i` at `(i × 7) mod 21 − 10`: 21 levels, neighbours far apart.
    Mixed,
}

impl Mix {
    fn priority(self, i: u64) -> i16 {
        match self {
            Mix::Single => 0,
            Mix::Mixed => i16::try_from(i.wrapping_mul(7) % 21).unwrap_or(0) - 10,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Mix::Single => "single",
            Mix::Mixed => "mixed",
        }
    }
}

fn priority(c: &mut Criterion) {
    let rt = support::runtime();
    let env = Env::from_env();
    env.announce_skips();
    for backend in env.available() {
        for mix in [Mix::Single, Mix::Mixed] {
            group(c, &rt, &env, backend, mix);
        }
    }
}

/// One criterion group: a backend and a priority mix, over the claimer counts.
fn group(c: &mut Criterion, rt: &tokio::runtime::Runtime, env: &Env, backend: Backend, mix: Mix) {
    let bed = support::or_die(rt.block_on(Bed::open(env, backend, 8)), "open");
    let mut group = c.benchmark_group(format!("priority/{backend}/{}", mix.name()));
    support::configure(&mut group, criterion_test_mode());
    group.throughput(Throughput::Elements(1));
    for claimers in CLAIMERS {
        let spec = Spec { queues: 1, claimers, batch: BATCH };
        group.bench_function(BenchmarkId::from_parameter(claimers), |b| {
            b.to_async(rt).iter_custom(|iters| drain(&bed, spec, mix, iters));
        });
        support::or_die(rt.block_on(support::prune(&bed)), "prune");
    }
    group.finish();
    support::or_die(rt.block_on(bed.close()), "close");
}

/// Enqueues `n` tasks with `mix`'s priorities on the bench queue, 1,000 per `enqueue_many`.
async fn fill(bed: &Bed, mix: Mix, n: u64) -> benches::Result<()> {
    let queue = Spec::queue(0);
    let mut next = 0;
    while next < n {
        let end = n.min(next + 1_000);
        let tasks: Vec<Task> = (next..end)
            .map(|i| Task::new(TASK_TYPE, &queue).with_priority(mix.priority(i)))
            .collect();
        bed.broker.enqueue_many(&tasks).await?;
        next = end;
    }
    Ok(())
}

/// Fills `iters` tasks (untimed), then times claim+ack of all of them.
async fn drain(bed: &Bed, spec: Spec, mix: Mix, iters: u64) -> std::time::Duration {
    support::or_die(fill(bed, mix, iters).await, "fill");
    let out = drive::broker_run(bed, spec, &[iters], Stop::Drained(support::SAFETY)).await;
    let out = support::or_die(out, "claim+ack");
    support::check_jobs(out.jobs, iters);
    out.elapsed
}

criterion_group!(benches, priority);
criterion_main!(benches);
