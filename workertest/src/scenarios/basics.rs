//! Submit, wait, stats, idempotent submit, replay, rate isolation and routing (runtime spec
//! §12.7, first scenarios).

use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{ErrorKind, ReplayRequest, Status, DEFAULT_MAX_RETRY};
use taskgate_worker::{Config, Error, JobError, QueueConfig, SubmitOptions};

use super::{count, kind_of};
use crate::jobs::{Calls, Echo, Gate, Work};
use crate::{eventually, within, World};

/// Submit → wait returns the handler's output; `created_at ≤ started_at ≤ finished_at`.
pub async fn w01_submit_wait_result(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world
        .start(|b| b.register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) }))
        .await?;
    let client = rt.client();
    let id = client.submit(Echo { text: "hello".into() }).await?;
    assert_eq!(within("wait", client.wait(&id)).await??, "hello");
    let task = client.get(id.as_str()).await?;
    assert_eq!(
        (task.status, task.max_retry),
        (Status::Completed, DEFAULT_MAX_RETRY),
        "default budget"
    );
    let (started, finished) =
        (task.started_at.ok_or("no start")?, task.finished_at.ok_or("no finish")?);
    assert!(task.created_at <= started && started <= finished, "{task:?}");
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A wait given up on (its future dropped) leaves the task running; it still completes.
pub async fn w02_wait_gives_up_task_completes(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let gate = Gate::default();
    let g = gate.clone();
    let rt = world
        .start(move |b| {
            b.register(move |job: Echo, _ctx| {
                let g = g.clone();
                async move {
                    g.pass().await;
                    Ok::<_, JobError>(job.text)
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Echo { text: "late".into() }).await?;
    let early = tokio::time::timeout(Duration::from_millis(200), client.wait(&id)).await;
    assert!(early.is_err(), "the wait must time out while the handler is held");
    gate.open();
    assert_eq!(within("wait", client.wait(&id)).await??, "late");
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Stats agree with the broker: 3 pending `alpha` (nobody handles it), 2 completed `beta`.
pub async fn w03_stats_consistency(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let config = Config::new()
        .default_queue(None)
        .queue("alpha", QueueConfig::workers(2))
        .queue("beta", QueueConfig::workers(3).rps(50.0));
    let rt =
        world.start(|b| b.config(config).register_raw("beta", |_ctx| async { Ok(None) })).await?;
    let client = rt.client();
    for _ in 0..3 {
        client.submit_raw("alpha", None, SubmitOptions::new()).await?;
    }
    let betas = [
        client.submit_raw("beta", None, SubmitOptions::new()).await?.id,
        client.submit_raw("beta", None, SubmitOptions::new()).await?.id,
    ];
    for id in &betas {
        within("beta", client.wait_task(id)).await??;
    }
    let alpha = client.stats("alpha").await?;
    assert_eq!((alpha.workers, alpha.running, alpha.queue_len), (2, 0, 3));
    let beta = client.stats("beta").await?;
    assert_eq!((beta.workers, beta.running, beta.queue_len, beta.rps), (3, 0, 0, 50.0));
    assert!(!beta.paused && !beta.quota_exhausted && !beta.quota_stalled);
    assert_eq!(count(&client, "alpha", Status::Pending).await?, 3);
    assert_eq!(count(&client, "beta", Status::Completed).await?, 2);
    assert!(matches!(client.stats("gamma").await, Err(Error::UnknownQueue(q)) if q == "gamma"));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A second submit with a used business key fails with `TaskExists` naming the first.
pub async fn w04_business_key_idempotent(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world
        .start(|b| b.register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) }))
        .await?;
    let client = rt.client();
    let opts = || SubmitOptions::new().business_key("order-7");
    let first = client.submit_with(Echo { text: "one".into() }, opts()).await?;
    within("first", client.wait(&first)).await??;
    let again = client.submit_with(Echo { text: "two".into() }, opts()).await;
    match again {
        Err(Error::Broker(taskgate::Error::TaskExists { existing: Some(e), .. })) => {
            assert_eq!((e.execution_id.as_str(), e.status), (first.as_str(), Status::Completed));
        }
        other => panic!("expected TaskExists, got {other:?}"),
    }
    assert_eq!(client.history("order-7").await?.len(), 1);
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A failed keyed job replayed by 8 concurrent callers: one replay wins, the others get
/// `AlreadyReplayed`; the new execution runs and completes.
pub async fn w05_replay_flow(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let rt = world
        .start(move |b| {
            b.register(move |job: Work, _ctx| {
                let first = c.hit() == 1;
                async move {
                    match first {
                        true => Err(JobError::skip(JobError::msg("first run fails"))),
                        false => Ok(job.n),
                    }
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit_with(Work { n: 8 }, SubmitOptions::new().business_key("r-1")).await?;
    let failed = within("first run", client.wait(&id)).await?;
    assert!(matches!(failed, Err(Error::TaskFailed { status: Status::Failed, .. })));
    let replays = (0..8).map(|_| {
        let (client, id) = (client.clone(), id.clone());
        let target = ReplayRequest::by_id(id.as_str());
        tokio::spawn(async move { client.replay(target).await })
    });
    let mut won = Vec::new();
    for handle in replays {
        match handle.await? {
            Ok(task) => won.push(task),
            Err(e) => assert_eq!(e.broker_kind(), Some(ErrorKind::AlreadyReplayed), "{e}"),
        }
    }
    assert_eq!(won.len(), 1, "exactly one replay wins");
    let new = within("replayed run", client.wait_task(&won[0].id)).await??;
    assert_eq!(new.result.as_deref(), Some(&b"8"[..]));
    let history = client.history("r-1").await?;
    let statuses: Vec<Status> = history.iter().map(|t| t.status).collect();
    assert_eq!(statuses, [Status::Failed, Status::Completed]);
    assert_eq!(history[1].replay_of, id.as_str());
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A slow queue (1 worker, 1 start/s) does not hold back a fast one (8 workers): all 20 fast
/// tasks finish while the 5 slow ones are still going.
pub async fn w06_throttle_isolation(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let config = Config::new()
        .queue("slow", QueueConfig::workers(1).rps(1.0))
        .queue("fast", QueueConfig::workers(8));
    let rt = world
        .start(|b| {
            b.config(config)
                .register_raw("slow", |_ctx| async { Ok(None) })
                .register_raw("fast", |_ctx| async { Ok(None) })
        })
        .await?;
    let client = rt.client();
    let mut group = client.group();
    for _ in 0..5 {
        group.add_raw("slow", None, SubmitOptions::new());
    }
    for _ in 0..20 {
        group.add_raw("fast", None, SubmitOptions::new());
    }
    group.submit().await?;
    eventually("20 fast completed", || async {
        Ok(count(&client, "fast", Status::Completed).await? == 20)
    })
    .await?;
    let slow_done = count(&client, "slow", Status::Completed).await?;
    assert!(slow_done < 5, "slow finished {slow_done} of 5 before fast was done");
    eventually("5 slow completed", || async {
        Ok(count(&client, "slow", Status::Completed).await? == 5)
    })
    .await?;
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Routes live in the config: a pure producer (no handlers) routes `echo` to `pings` like the
/// consumer does; an unroutable type is an error at submit.
pub async fn w07_routes_pure_producer(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let config = Config::new()
        .default_queue(None)
        .queue("pings", QueueConfig::workers(2))
        .route("echo", "pings");
    let producer = world.start(|b| b.config(config.clone())).await?;
    let consumer = world
        .start(|b| {
            b.config(config).register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) })
        })
        .await?;
    let client = producer.client();
    let id = client.submit(Echo { text: "routed".into() }).await?;
    assert_eq!(within("routed", client.wait(&id)).await??, "routed");
    assert_eq!(client.get(id.as_str()).await?.queue, "pings");
    let lost = client.submit_raw("nowhere", None, SubmitOptions::new()).await;
    assert!(matches!(lost, Err(Error::UnknownQueue(q)) if q == "nowhere"));
    assert_eq!(
        kind_of(&client.submit_raw("", None, SubmitOptions::new()).await),
        Some(ErrorKind::InvalidInput)
    );
    producer.shutdown(Duration::from_secs(5)).await?;
    consumer.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A submitted priority reaches the task and orders the runs: a producer submits `late`
/// (priority 5), `plain` (no priority: 0) and `urgent` (−5) to a queue nobody consumes yet;
/// a consumer with one worker then runs them `urgent`, `plain`, `late`. A priority out of
/// range is `InvalidInput` at submit.
pub async fn w44_priority_orders_runs(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let config = Config::new().default_queue(None).queue("prio", QueueConfig::workers(1));
    let producer = world.start(|b| b.config(config.clone())).await?;
    let client = producer.client();
    let mut ids = Vec::new();
    for (name, opts) in [
        ("late", SubmitOptions::new().priority(5)),
        ("plain", SubmitOptions::new()),
        ("urgent", SubmitOptions::new().priority(-5)),
    ] {
        let task = client.submit_raw("prio", Some(name.as_bytes().to_vec()), opts).await?;
        ids.push((name, task.id));
    }
    for ((_, id), want) in ids.iter().zip([5, 0, -5]) {
        assert_eq!(client.get(id).await?.priority, want, "the stored priority of {id}");
    }
    let bad = client.submit_raw("prio", None, SubmitOptions::new().priority(101)).await;
    assert_eq!(kind_of(&bad), Some(ErrorKind::InvalidInput), "priority 101 at submit");
    let order = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let seen = order.clone();
    let consumer = world
        .start(move |b| {
            b.config(config).register_raw("prio", move |ctx| {
                let seen = seen.clone();
                async move {
                    let name = String::from_utf8_lossy(ctx.payload().unwrap_or_default());
                    seen.lock().map_err(JobError::msg)?.push(name.into());
                    Ok(None)
                }
            })
        })
        .await?;
    for (name, id) in &ids {
        within(name, client.wait_task(id)).await??;
    }
    let ran = order.lock().map_err(|e| e.to_string())?.clone();
    assert_eq!(ran, ["urgent", "plain", "late"], "one worker runs by priority");
    producer.shutdown(Duration::from_secs(5)).await?;
    consumer.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}
