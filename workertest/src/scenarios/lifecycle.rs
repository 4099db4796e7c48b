//! Starting and stopping: graceful shutdown (flushes the completer), shutdown running out of
//! time (requeue, nothing counted), the state-change observer, batched acks lost in a crash
//! or found stale, idempotent shutdown, and config errors at start.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{Filter, ReplayRequest, Status, Task};
use taskgate_worker::{
    CompleterConfig, Config, Error, JobContext, JobError, Periodic, QueueConfig, SubmitOptions,
};

use crate::jobs::{Calls, Echo, Gate, Stage, Tick, Work};
use crate::{eventually, task_until, within, World};

/// Three running handlers finish within the grace period: shutdown is `Ok` and reports 3
/// finished, every result is written (the batched completer is flushed), nothing is left
/// running.
pub async fn w26_shutdown_graceful(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let gate = Gate::default();
    let g = gate.clone();
    let config = Config {
        completer: CompleterConfig::batched(100, Duration::from_secs(3600)),
        ..Config::new().queue("work", QueueConfig::workers(3))
    };
    let rt = world
        .start(move |b| {
            b.config(config).register(move |job: Work, _ctx| {
                let g = g.clone();
                async move {
                    g.pass().await;
                    Ok::<_, JobError>(job.n * 10)
                }
            })
        })
        .await?;
    let client = rt.client();
    let mut ids = Vec::new();
    for n in 1..=3 {
        ids.push(client.submit(Work { n }).await?);
    }
    eventually("3 running", || async { Ok(client.stats("work").await?.running == 3) }).await?;
    let (stopped, ()) = tokio::join!(rt.shutdown(Duration::from_secs(10)), async {
        tokio::time::sleep(Duration::from_millis(50)).await;
        gate.open();
    });
    let report = stopped?;
    assert!(!report.grace_elapsed, "{report:?}");
    assert_eq!((report.finished, report.finished_after_grace, report.requeued), (3, 0, 0));
    assert_eq!(report.to_string(), "shutdown: 3 finished");
    for (n, id) in (1..=3).zip(&ids) {
        let t = client.get(id.as_str()).await?;
        assert_eq!(t.status, Status::Completed, "flushed at shutdown");
        assert_eq!(t.result, Some((n * 10).to_string().into_bytes()));
    }
    let running = Filter { status: Some(Status::Running), ..Filter::default() };
    assert!(client.list(&running).await?.is_empty());
    world.finish().await
}

/// Shutdown with 300 ms grace while two handlers run: `Ok`, reporting the grace elapsed; the
/// handler that fails when cancelled is requeued with counters and `run_at` unchanged; the one
/// that still returns success is acked — one requeued and one finished after the grace.
/// Running out of grace is reported, never an error.
pub async fn w27_shutdown_timeout_requeues(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let config = Config::new()
        .queue("work", QueueConfig::workers(1))
        .queue("stage", QueueConfig::workers(1));
    // Started handlers, not claimed tasks: a claimed task is `running` in the broker before
    // its handler starts (it may wait in the claim-ahead buffer, §12.3.5).
    let started = Calls::default();
    let (s1, s2) = (started.clone(), started.clone());
    let rt = world
        .start(move |b| {
            b.config(config)
                .register(move |_job: Work, ctx: JobContext| {
                    let s = s1.clone();
                    async move {
                        s.hit();
                        ctx.cancelled().await;
                        Err::<u32, _>(JobError::msg("interrupted"))
                    }
                })
                .register(move |job: Stage, ctx: JobContext| {
                    let s = s2.clone();
                    async move {
                        s.hit();
                        ctx.cancelled().await;
                        Ok::<_, JobError>(job.n)
                    }
                })
        })
        .await?;
    let client = rt.client();
    let work = client.submit(Work { n: 1 }).await?;
    let stage = client.submit(Stage { n: 2 }).await?;
    let before = client.get(work.as_str()).await?;
    for id in [work.as_str(), stage.as_str()] {
        task_until(&client, id, "running", |t| t.status == Status::Running).await?;
    }
    eventually("both handlers started", || async { Ok(started.get() == 2) }).await?;
    let report = rt.shutdown(Duration::from_millis(300)).await?;
    assert!(report.grace_elapsed, "{report:?}");
    assert_eq!((report.finished, report.finished_after_grace, report.requeued), (0, 1, 1));
    assert_eq!((report.held_requeued, report.lease_lost, report.write_failed), (0, 0, 0));
    assert_eq!(
        report.to_string(),
        "shutdown: 0 finished, 1 finished after the grace period, 1 interrupted and requeued \
         (grace period elapsed)"
    );
    let t = client.get(work.as_str()).await?;
    assert_eq!(t.status, Status::Pending);
    assert_eq!((t.attempts, t.lease_lost, t.throttled), (0, 0, 0));
    assert_eq!(t.run_at, before.run_at, "run_at unchanged");
    assert_eq!(client.get(stage.as_str()).await?.status, Status::Completed, "finished work kept");
    world.finish().await
}

/// The observer sees a task's states from the process that wrote them; an observer that
/// panics on every call changes nothing; a producer-only runtime observes its submits.
pub async fn w28_state_change_observer(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let seen: Arc<Mutex<Vec<(String, Status)>>> = Arc::default();
    let s = seen.clone();
    let consumer = world
        .start(move |b| {
            b.on_state_change(move |t: &Task| {
                s.lock().unwrap_or_else(|p| p.into_inner()).push((t.id.clone(), t.status));
            })
            .register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) })
        })
        .await?;
    let panics = Calls::default();
    let p = panics.clone();
    let producer = world
        .start(move |b| {
            b.on_state_change(move |_t: &Task| {
                p.hit();
                panic!("observer panics on purpose");
            })
        })
        .await?;
    let client = producer.client();
    let first = client.submit(Echo { text: "a".into() }).await?;
    let second = client.submit(Echo { text: "b".into() }).await?;
    for id in [&first, &second] {
        assert_eq!(within("wait", client.wait(id)).await??.len(), 1);
    }
    eventually("the producer observed both submits", || async { Ok(panics.get() >= 2) }).await?;
    eventually("the consumer observed running and completed", || async {
        let seen = seen.lock().unwrap_or_else(|p| p.into_inner());
        let has = |s| seen.iter().any(|(id, st)| id == first.as_str() && *st == s);
        Ok(has(Status::Running) && has(Status::Completed))
    })
    .await?;
    consumer.shutdown(Duration::from_secs(5)).await?;
    producer.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A batched ack not yet flushed when the runtime dies (dropped without shutdown): the task
/// stays running, and after its lease another runtime's reaper gives it back and it runs
/// again (LeaseLost 1) — never lost.
pub async fn w34_completer_crash_reruns(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let config = |completer| Config {
        completer,
        ..Config::new().queue("work", QueueConfig::workers(1).lease_ttl(Duration::from_secs(10)))
    };
    let c = calls.clone();
    let handler = move |job: Work, _ctx: JobContext| {
        c.hit();
        async move { Ok::<_, JobError>(job.n) }
    };
    let lazy = config(CompleterConfig::batched(1000, Duration::from_secs(3600)));
    let h = handler.clone();
    let a = world.start(move |b| b.config(lazy).register(h)).await?;
    let client = a.client();
    let id = client.submit(Work { n: 6 }).await?;
    eventually("handler done, ack handed over", || async {
        Ok(calls.get() == 1 && client.stats("work").await?.running == 0)
    })
    .await?;
    drop(a);
    assert_eq!(client.get(id.as_str()).await?.status, Status::Running, "the ack was never written");
    let b =
        world.start(move |b| b.config(config(CompleterConfig::inline())).register(handler)).await?;
    let client = b.client();
    world.advance(Duration::from_millis(10_001));
    let t =
        task_until(&client, id.as_str(), "completed on rerun", |t| t.status == Status::Completed)
            .await?;
    assert_eq!((t.lease_lost, calls.get()), (1, 2));
    b.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A batched ack whose lease expired before the flush: that item is `LeaseLost` (the reaper
/// owned it and the task ran again); the rerun's ack in the same flush completes it.
pub async fn w35_completer_lease_lost_item(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let config = Config {
        completer: CompleterConfig::batched(1000, Duration::from_secs(3600)),
        ..Config::new().queue("work", QueueConfig::workers(1).lease_ttl(Duration::from_secs(1)))
    };
    let rt = world
        .start(move |b| {
            b.config(config).register(move |job: Work, _ctx| {
                c.hit();
                async move { Ok::<_, JobError>(job.n) }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 8 }).await?;
    let handed = |n| {
        let (calls, client) = (calls.clone(), client.clone());
        async move {
            eventually("handler done, ack handed over", || async {
                Ok(calls.get() == n && client.stats("work").await?.running == 0)
            })
            .await
        }
    };
    handed(1).await?;
    world.advance(Duration::from_millis(1_001));
    handed(2).await?;
    rt.shutdown(Duration::from_secs(5)).await?;
    let t = client.get(id.as_str()).await?;
    assert_eq!(
        (t.status, t.lease_lost, t.result.as_deref()),
        (Status::Completed, 1, Some(&b"8"[..]))
    );
    world.finish().await
}

/// Shutdown twice is fine; afterwards submits, group submits and replays are refused.
pub async fn w41_shutdown_idempotent(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world
        .start(|b| b.register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) }))
        .await?;
    let client = rt.client();
    let id = client.submit(Echo { text: "x".into() }).await?;
    within("wait", client.wait(&id)).await??;
    rt.shutdown(Duration::from_secs(5)).await?;
    rt.shutdown(Duration::from_secs(5)).await?;
    assert!(matches!(client.submit(Echo { text: "y".into() }).await, Err(Error::Shutdown)));
    let mut group = client.group();
    group.add(Echo { text: "z".into() }, SubmitOptions::new());
    assert!(matches!(group.submit().await, Err(Error::Shutdown)));
    let replay = client.replay(ReplayRequest::by_id(id.as_str()).allow_completed()).await;
    assert!(matches!(replay, Err(Error::Shutdown)));
    world.finish().await
}

/// Bad configuration fails `start` with an error naming the setting; nothing runs.
pub async fn w42_config_errors(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let field_of = |r: Result<taskgate_worker::Runtime, Error>| match r {
        Err(Error::Config { field, .. }) => field,
        Err(e) => format!("other error: {e}"),
        Ok(_) => "started".to_owned(),
    };
    let zero = Config::new().queue("work", QueueConfig::workers(0));
    assert_eq!(field_of(world.builder().await?.config(zero).start().await), "queues.work.workers");
    let nowhere = Config::new().default_queue(None).route("echo", "missing");
    assert_eq!(field_of(world.builder().await?.config(nowhere).start().await), "routes.echo");
    let twice = world
        .builder()
        .await?
        .register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) })
        .register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) });
    assert_eq!(field_of(twice.start().await), "handlers.echo");
    let bad_cron = Periodic::new("p", "not a pattern", Tick).err();
    assert!(matches!(bad_cron, Some(Error::Config { field, .. }) if field == "periodic.p"));
    let unrouted = Config::new().default_queue(None);
    let no_queue = world
        .builder()
        .await?
        .config(unrouted)
        .register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) })
        .start()
        .await;
    assert!(matches!(no_queue, Err(Error::UnknownQueue(q)) if q == "echo"));
    world.finish().await
}

/// A handler that blocks its thread (`std::thread::sleep`, not `.await`) past the grace
/// period and the stop timeout cannot be interrupted or dropped: shutdown waits for it, and
/// when it returns success its result is acked. The report says so — one finished after the
/// grace, none requeued — and the task is completed with its result.
pub async fn w47_shutdown_reports_blocking_handler(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let started = Calls::default();
    let s = started.clone();
    let config = Config::new().queue("work", QueueConfig::workers(1));
    let rt = world
        .start(move |b| {
            b.config(config).stop_timeout(Duration::from_millis(100)).register(
                move |job: Work, _ctx: JobContext| {
                    s.hit();
                    // Blocks this runtime thread: no `.await` point, so no cancellation.
                    std::thread::sleep(Duration::from_millis(1_500));
                    async move { Ok::<_, JobError>(job.n * 2) }
                },
            )
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 21 }).await?;
    eventually("the blocking handler started", || async { Ok(started.get() == 1) }).await?;
    let report = within("shutdown", rt.shutdown(Duration::from_millis(200))).await??;
    let t = client.get(id.as_str()).await?;
    assert_eq!((t.status, t.result.as_deref()), (Status::Completed, Some(&b"42"[..])));
    assert!(report.grace_elapsed, "{report:?}");
    assert_eq!((report.finished, report.finished_after_grace, report.requeued), (0, 1, 0));
    assert_eq!((report.lease_lost, report.write_failed), (0, 0), "{report:?}");
    world.finish().await
}
