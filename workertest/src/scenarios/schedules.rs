//! Periodic jobs across processes, stepwise jobs, queue pause, and tasks nobody here handles.

use std::collections::BTreeSet;
use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{Filter, Status, Step};
use taskgate_worker::{
    Config, JobContext, JobError, Periodic, QueueConfig, Stepped, SubmitOptions,
};

use crate::jobs::{Calls, CountTo, Echo, Tick};
use crate::{eventually, task_until, within, World};

/// Three runtimes (three handles on one storage) run the same every-second schedule for 10
/// ticks of a fake clock: exactly 10 executions, one per tick.
pub async fn w36_periodic_once_per_tick(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let mut runtimes = Vec::new();
    for _ in 0..3 {
        let c = calls.clone();
        let schedule = Periodic::new("every-second", "* * * * * *", Tick)?;
        runtimes.push(
            world
                .start(move |b| {
                    b.periodic(schedule).register(move |_job: Tick, _ctx| {
                        c.hit();
                        async { Ok::<_, JobError>(()) }
                    })
                })
                .await?,
        );
    }
    let client = runtimes[0].client();
    let ticks = Filter { task_type: "tick".into(), ..Filter::default() };
    for tick in 1..=10usize {
        world.advance(Duration::from_secs(1));
        eventually(&format!("tick {tick} ran"), || async {
            let done = client.list(&ticks).await?;
            Ok(done.len() == tick && done.iter().all(|t| t.status == Status::Completed))
        })
        .await?;
    }
    for rt in &runtimes {
        rt.shutdown(Duration::from_secs(5)).await?;
    }
    let done = client.list(&ticks).await?;
    let keys: BTreeSet<&str> = done.iter().map(|t| t.business_key.as_str()).collect();
    assert_eq!((done.len(), keys.len(), calls.get()), (10, 10, 10), "{keys:?}");
    assert!(keys.iter().all(|k| k.starts_with("periodic:every-second:")));
    world.finish().await
}

/// A stepwise job counts to 3 one step per run: two saved steps (cursor and progress passed
/// on, attempts untouched), then the output.
pub async fn w37_stepwise_job(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let rt = world
        .start(move |b| {
            b.register_steps(move |job: CountTo, ctx: JobContext| {
                c.hit();
                async move {
                    let at: u32 = ctx.cursor_json()?.unwrap_or(0);
                    let next = at + 1;
                    if next == job.to {
                        return Ok(Stepped::Done(next));
                    }
                    let progress = u8::try_from(next * 100 / job.to).ok();
                    Ok::<_, JobError>(Stepped::Step(Step {
                        cursor: Some(serde_json::to_vec(&next)?),
                        progress,
                        message: format!("at {next}"),
                        delay: Duration::ZERO,
                    }))
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(CountTo { to: 3 }).await?;
    assert_eq!(within("wait", client.wait(&id)).await??, 3);
    let t = client.get(id.as_str()).await?;
    assert_eq!((t.steps, t.attempts, calls.get()), (2, 0, 3));
    assert_eq!((t.progress, t.message.as_str()), (Some(66), "at 2"));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A paused queue is not claimed (its task stays pending while the runtime runs); resuming
/// runs it.
pub async fn w38_pause_honoured(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world
        .start(|b| b.register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) }))
        .await?;
    let client = rt.client();
    client.pause_queue("echo").await?;
    let id = client.submit(Echo { text: "held".into() }).await?;
    assert!(client.stats("echo").await?.paused);
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(client.get(id.as_str()).await?.status, Status::Pending, "paused: not claimed");
    client.resume_queue("echo").await?;
    assert_eq!(within("wait", client.wait(&id)).await??, "held");
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A queue shared by two types where this process handles only one: the other type fails
/// at once "no handler registered for task type: `<type>`" (replayable).
pub async fn w39_no_handler_skip(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let config = Config::new()
        .queue("shared", QueueConfig::workers(2))
        .route("echo", "shared")
        .route("other", "shared");
    let rt = world
        .start(|b| {
            b.config(config).register(|job: Echo, _ctx| async move { Ok::<_, JobError>(job.text) })
        })
        .await?;
    let client = rt.client();
    let stray = client.submit_raw("other", None, SubmitOptions::new()).await?;
    let t = task_until(&client, &stray.id, "failed", |t| t.status == Status::Failed).await?;
    assert_eq!(t.last_error, "no handler registered for task type: other");
    assert_eq!((t.attempts, t.throttled), (0, 0));
    let id = client.submit(Echo { text: "mine".into() }).await?;
    assert_eq!(within("wait", client.wait(&id)).await??, "mine");
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A result over the payload limit, or a step with a delay over 60 s, is refused by the
/// broker: the task fails at once with the reason instead of running again after each lease.
pub async fn w43_rejected_writes_fail(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world
        .start(|b| {
            b.max_payload_bytes(64)
                .register(|_job: Echo, _ctx| async { Ok::<_, JobError>("x".repeat(1_000)) })
                .register_steps(|_job: CountTo, _ctx| async {
                    let step = Step { delay: Duration::from_secs(61), ..Step::default() };
                    Ok::<_, JobError>(Stepped::<u32>::Step(step))
                })
        })
        .await?;
    let client = rt.client();
    let big = client.submit(Echo { text: "big".into() }).await?;
    let slow = client.submit(CountTo { to: 9 }).await?;
    for (id, prefix) in [(big.as_str(), "result rejected: "), (slow.as_str(), "step rejected: ")] {
        let t = task_until(&client, id, "failed", |t| t.status == Status::Failed).await?;
        assert!(t.last_error.starts_with(prefix), "{}", t.last_error);
        assert_eq!((t.attempts, t.lease_lost), (0, 0));
    }
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}
