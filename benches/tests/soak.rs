//! The soak measures what it claims to: a short real run on every available backend (memory
//! and SQLite always; PostgreSQL / MySQL when their URLs are set) takes one sample per window,
//! each with its latency, counts and — on the SQL backends — the storage's size. No timing is
//! asserted.

use std::time::Duration;

use benches::backend::{Backend, Bed, Env};
use benches::soak::{self, Sample, SoakSpec, Summary};
use benches::Result;
use brokertest::{within, TEST_LIMIT};

fn spec() -> SoakSpec {
    SoakSpec {
        rate: 200,
        claimers: 2,
        batch: 10,
        duration: Duration::from_secs(3),
        sample_every: Duration::from_millis(500),
        prune_every: Duration::from_millis(500),
        retention: Duration::from_secs(1),
    }
}

fn check(backend: Backend, samples: &[Sample]) {
    assert_eq!(samples.len(), 6, "{backend}: one sample per window");
    assert!(samples.windows(2).all(|w| w[0].at < w[1].at), "{backend}: samples in time order");
    let produced: u64 = samples.iter().map(|s| s.produced).sum();
    let completed: u64 = samples.iter().map(|s| s.completed).sum();
    let picked: usize = samples.iter().map(|s| s.pickup.n).sum();
    assert!(produced > 0 && completed > 0 && picked > 0, "{backend}: {samples:?}");
    assert!(completed <= produced, "{backend}: nothing completes that was not produced");
    for s in samples {
        match backend {
            Backend::Memory => assert_eq!((s.size_bytes, s.dead_rows), (None, None)),
            Backend::Sqlite | Backend::MySql => {
                assert!(s.size_bytes.is_some_and(|b| b > 0), "{backend}: size in {s:?}");
                assert_eq!(s.dead_rows, None, "{backend}");
            }
            Backend::Postgres => {
                assert!(s.size_bytes.is_some_and(|b| b > 0), "{backend}: size in {s:?}");
                assert!(s.dead_rows.is_some(), "{backend}: n_dead_tup in {s:?}");
            }
        }
    }
    let summary = Summary::of(samples);
    assert_eq!(summary.samples, 6);
    assert!(summary.p99_ms.is_some() && summary.rows.is_some(), "{backend}: {summary:?}");
    assert_eq!(summary.size_bytes.is_some(), backend.is_sql(), "{backend}");
    assert!(summary.bounded.size_growth.is_some(), "{backend}: {summary:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_soak_samples_every_window_with_sizes() -> Result<()> {
    within(TEST_LIMIT, "a_short_soak_samples_every_window_with_sizes", async move {
        let env = Env::from_env();
        env.announce_skips();
        for backend in env.available() {
            let bed = Bed::open(&env, backend, 4).await?;
            let mut seen = 0;
            let samples = soak::run(&bed, spec(), |_| seen += 1).await?;
            assert_eq!(seen, samples.len(), "{backend}: every sample reported as taken");
            check(backend, &samples);
            bed.close().await?;
        }
        Ok(())
    })
    .await
}
