//! Periodic jobs across processes, stepwise jobs, queue pause, and tasks nobody here handles.

use std::collections::BTreeSet;
use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{Clock, Filter, ManualClock, Status, Step, Timestamp};
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

/// The keys of ticks 1..=n of the every-second schedule `name`, from the contract epoch.
fn tick_keys(name: &str, n: u64) -> BTreeSet<String> {
    let epoch = ManualClock::at_contract_epoch().now_ms();
    (1..=n)
        .map(|k| {
            let tick = epoch.saturating_add(Duration::from_secs(k));
            format!("periodic:{name}:{}", tick.as_millis())
        })
        .collect()
}

/// Advances the world's clock one second at a time for `n` ticks; after each, exactly the
/// ticks due by the broker's clock exist, and all of them completed.
async fn run_ticks(world: &World, client: &taskgate_worker::Client, n: u64) -> CaseResult {
    let ticks = Filter { task_type: "tick".into(), ..Filter::default() };
    for tick in 1..=n {
        world.advance(Duration::from_secs(1));
        let expected = usize::try_from(tick)?;
        eventually(&format!("tick {tick} ran, no other"), || async {
            let done = client.list(&ticks).await?;
            Ok(done.len() == expected && done.iter().all(|t| t.status == Status::Completed))
        })
        .await?;
    }
    Ok(())
}

/// A runtime whose own clock runs 90 s ahead of the broker's submits each tick of an
/// every-second schedule when it is due by the broker's clock (`Broker::now`), not 90 s
/// early: after each second of the broker's clock exactly that tick exists and ran, keyed
/// and scheduled (`run_at`) at the tick's own time.
pub async fn w48_periodic_due_by_broker_clock(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let schedule = Periodic::new("ahead", "* * * * * *", Tick)?;
    let rt = world
        .start_skewed(90_000, move |b| {
            b.periodic(schedule).register(move |_job: Tick, _ctx| {
                c.hit();
                async { Ok::<_, JobError>(()) }
            })
        })
        .await?;
    let client = rt.client();
    run_ticks(&world, &client, 5).await?;
    rt.shutdown(Duration::from_secs(5)).await?;
    let done = client.list(&Filter { task_type: "tick".into(), ..Filter::default() }).await?;
    let keys: BTreeSet<String> = done.iter().map(|t| t.business_key.clone()).collect();
    assert_eq!(keys, tick_keys("ahead", 5), "one execution per tick, keyed by the tick");
    for t in &done {
        let at = t.business_key.rsplit(':').next().ok_or("no tick in the key")?;
        assert_eq!(t.run_at, Timestamp::from_millis(at.parse()?), "run_at is the tick");
    }
    assert_eq!(calls.get(), 5);
    world.finish().await
}

/// Three runtimes whose clocks are off from the broker's by +250 ms, −1.7 s and +3 s run one
/// every-second schedule for 10 seconds of the broker's clock: exactly 10 executions, one
/// per tick, keyed by the tick's own time — none early, none twice.
pub async fn w49_periodic_skewed_runtimes_once_per_tick(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let mut runtimes = Vec::new();
    for skew_ms in [250, -1_700, 3_000] {
        let c = calls.clone();
        let schedule = Periodic::new("skewed", "* * * * * *", Tick)?;
        let tune = move |b: taskgate_worker::Builder| {
            b.periodic(schedule).register(move |_job: Tick, _ctx| {
                c.hit();
                async { Ok::<_, JobError>(()) }
            })
        };
        runtimes.push(world.start_skewed(skew_ms, tune).await?);
    }
    let client = runtimes[0].client();
    run_ticks(&world, &client, 10).await?;
    for rt in &runtimes {
        rt.shutdown(Duration::from_secs(5)).await?;
    }
    let done = client.list(&Filter { task_type: "tick".into(), ..Filter::default() }).await?;
    let keys: BTreeSet<String> = done.iter().map(|t| t.business_key.clone()).collect();
    assert_eq!((done.len(), calls.get()), (10, 10), "{keys:?}");
    assert_eq!(keys, tick_keys("skewed", 10));
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
