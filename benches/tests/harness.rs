//! The harness measures what it claims to: fills store exactly the tasks asked for, drains
//! complete every one of them (broker and raw ceiling), seeded rows are finished, pickups and
//! the pipeline return samples. Memory and SQLite always; PostgreSQL / MySQL when their URLs
//! are set.

use std::time::Duration;

use benches::backend::{Backend, Bed, Env};
use benches::drive::{self, Spec, Stop};
use benches::{fill, pickup, produce, raw, Result};
use brokertest::{within, TEST_LIMIT};
use taskgate::Status;

fn backends() -> Vec<Backend> {
    let env = Env::from_env();
    env.announce_skips();
    env.available()
}

async fn completed(bed: &Bed) -> Result<u64> {
    let counts = bed.broker.counts().await?;
    Ok(counts.get(fill::TASK_TYPE).and_then(|m| m.get(&Status::Completed)).copied().unwrap_or(0))
}

async fn ready(bed: &Bed, spec: Spec) -> Result<u64> {
    let mut n = 0;
    for lane in 0..spec.lanes() {
        n += bed.broker.queue_len(&Spec::queue(lane)).await?;
    }
    Ok(n)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_completes_exactly_the_backlog() -> Result<()> {
    within(TEST_LIMIT, "a_drain_completes_exactly_the_backlog", async move {
        let spec = Spec { queues: 8, claimers: 4, batch: 10 };
        for backend in backends() {
            for use_raw in [false, backend.is_sql()] {
                let bed = Bed::open(&Env::from_env(), backend, 4).await?;
                let per_lane = drive::split(spec, 503);
                drive::fill_lanes(&bed, &per_lane).await?;
                assert_eq!(ready(&bed, spec).await?, 503, "{backend}: backlog filled");
                let stop = Stop::Drained(Duration::from_secs(60));
                let out = if use_raw {
                    raw::raw_run(&bed, spec, &per_lane, stop).await?
                } else {
                    drive::broker_run(&bed, spec, &per_lane, stop).await?
                };
                assert_eq!(out.jobs, 503, "{backend} raw={use_raw}: jobs");
                assert_eq!(ready(&bed, spec).await?, 0, "{backend} raw={use_raw}: nothing left");
                assert_eq!(completed(&bed).await?, 503, "{backend} raw={use_raw}: all completed");
                bed.close().await?;
            }
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deadline_run_stops_on_time_with_backlog_left() -> Result<()> {
    within(TEST_LIMIT, "a_deadline_run_stops_on_time_with_backlog_left", async move {
        let bed = Bed::open(&Env::from_env(), Backend::Sqlite, 2).await?;
        let spec = Spec { queues: 1, claimers: 2, batch: 1 };
        let per_lane = drive::split(spec, 100_000);
        drive::fill_lanes(&bed, &per_lane).await?;
        let out =
            drive::broker_run(&bed, spec, &per_lane, Stop::Deadline(Duration::from_millis(300)))
                .await?;
        assert!(!out.exhausted);
        assert!(out.jobs > 0 && out.jobs < 100_000, "{out:?}");
        assert!(out.elapsed <= Duration::from_millis(400), "{out:?}");
        bed.close().await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn seeded_rows_are_finished_and_never_claimable() -> Result<()> {
    within(TEST_LIMIT, "seeded_rows_are_finished_and_never_claimable", async move {
        for backend in backends().into_iter().filter(|b| b.is_sql()) {
            let bed = Bed::open(&Env::from_env(), backend, 1).await?;
            fill::finished(&bed, 1_234).await?;
            fill::refresh_statistics(&bed).await?;
            assert_eq!(completed(&bed).await?, 1_234, "{backend}");
            let template = bed.broker.try_dequeue(&["retained"]).await?;
            assert!(template.is_some(), "{backend}: the template is the one ready task");
            assert!(bed.broker.try_dequeue(&["retained"]).await?.is_none(), "{backend}");
            bed.close().await?;
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pickups_and_the_pipeline_report_real_work() -> Result<()> {
    within(TEST_LIMIT, "pickups_and_the_pipeline_report_real_work", async move {
        for backend in [Backend::Memory, Backend::Sqlite] {
            let bed = Bed::open(&Env::from_env(), backend, 4).await?;
            let second = bed.second_handle().await?;
            let samples =
                pickup::pickups(bed.broker.clone(), second.clone(), 5, Duration::from_millis(5))
                    .await?;
            assert_eq!(samples.len(), 5);
            assert!(samples.iter().all(|d| *d < pickup::SAMPLE_TIMEOUT));
            let out = produce::pipeline(&bed.broker, 2, 4, 100, Duration::from_millis(500)).await?;
            eprintln!("{backend}: pipeline {} jobs in {:?}", out.jobs, out.elapsed);
            assert!(out.jobs >= 100, "{backend}: {out:?}");
            assert_eq!(completed(&bed).await?, 5 + out.jobs, "{backend}");
            second.close().await?;
            bed.close().await?;
        }
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_raw_pickup_ceiling_claims_and_completes_each_insert() -> Result<()> {
    within(TEST_LIMIT, "the_raw_pickup_ceiling_claims_and_completes_each_insert", async move {
        if !backends().contains(&Backend::Postgres) {
            return Ok(());
        }
        let bed = Bed::open(&Env::from_env(), Backend::Postgres, 3).await?;
        let samples = raw::pg_pickups(&bed, "raw-pickup", 5, Duration::from_millis(5)).await?;
        assert_eq!(samples.len(), 5);
        assert!(samples.iter().all(|d| *d > Duration::ZERO && *d < pickup::SAMPLE_TIMEOUT));
        // The claimer completes each task after its sample; the last completion may still be
        // on its way when the producer's loop ends.
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while completed(&bed).await? < 5 && std::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert_eq!(completed(&bed).await?, 5);
        assert_eq!(bed.broker.queue_len("raw-pickup").await?, 0);
        bed.close().await?;
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pgbench_claims_and_completes_what_it_counts() -> Result<()> {
    within(TEST_LIMIT, "pgbench_claims_and_completes_what_it_counts", async move {
        let env = Env::from_env();
        let Some(url) = env.pg_url.clone().filter(|_| backends().contains(&Backend::Postgres))
        else {
            return Ok(());
        };
        if !benches::pgbench::available() {
            eprintln!("taskgate benches: pgbench is not installed; its ceiling is not checked");
            return Ok(());
        }
        let bed = Bed::open(&env, Backend::Postgres, 1).await?;
        fill::backlog(&bed, &Spec::queue(0), 300).await?;
        let spec = Spec { queues: 1, claimers: 2, batch: 10 };
        let (rate, drained) = benches::pgbench::claim_ack(&bed, &url, spec, 1).await?;
        // 300 tasks at any rate a database reaches drain within the second.
        assert!(drained, "the backlog ran out");
        assert!(rate > 0.0);
        // The warm-up completed some; the measured second the rest: every task completed once,
        // none left running (each completion found its claim's rows by the claim's token).
        assert_eq!(completed(&bed).await?, 300);
        let counts = bed.broker.counts().await?;
        let running = counts.get(fill::TASK_TYPE).and_then(|m| m.get(&Status::Running));
        assert_eq!(running.copied().unwrap_or(0), 0);
        bed.close().await?;
        Ok(())
    })
    .await
}

/// The topology rows' beds (issue 39): every setup whose servers are here — PostgreSQL direct
/// and through PgBouncer, MariaDB's single server, Galera node 1 and the Galera nodes 1–3 — has
/// as many initialised handles as it says, and claimers spread over them complete exactly the
/// backlog, and a runtime per handle drains another one; the others are skipped loudly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn placed_beds_drain_exactly_the_backlog_across_their_handles() -> Result<()> {
    use benches::runtime::{self, RtSpec};
    use benches::topology::Family;
    within(TEST_LIMIT, "placed_beds_drain_exactly_the_backlog_across_their_handles", async move {
        let env = Env::from_env();
        for family in Family::ALL {
            if let Some(why) = family.skip_reason(&env) {
                eprintln!("==== SKIPPED: {why}");
                continue;
            }
            for &setup in family.setups() {
                let placement = setup.placement(&env)?;
                let bed = Bed::open_placed(&placement, 6).await?;
                assert_eq!(bed.handles().len(), setup.handles(), "{setup}: handles");
                let spec = Spec { queues: 1, claimers: 6, batch: 10 };
                let per_lane = drive::split(spec, 503);
                drive::fill_lanes(&bed, &per_lane).await?;
                let out = drive::broker_run(
                    &bed,
                    spec,
                    &per_lane,
                    Stop::Drained(Duration::from_secs(120)),
                )
                .await?;
                assert_eq!(out.jobs, 503, "{setup}: jobs");
                assert_eq!(ready(&bed, spec).await?, 0, "{setup}: nothing left");
                assert_eq!(completed(&bed).await?, 503, "{setup}: all completed");
                fill::backlog(&bed, runtime::QUEUE, 300).await?;
                let rt = RtSpec { workers: 2, completer: true };
                let drained =
                    runtime::drain_on(&bed.handles(), rt, 300, Duration::from_secs(120)).await?;
                assert!(drained.finished && drained.jobs == 300, "{setup}: {drained:?}");
                assert_eq!(completed(&bed).await?, 803, "{setup}: the runtimes' tasks completed");
                eprintln!("{setup}: {} handles drained 503 + 300 tasks", setup.handles());
                bed.close().await?;
            }
        }
        Ok(())
    })
    .await
}
