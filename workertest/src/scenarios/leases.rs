//! Leases kept and lost: the poison-task cap through the runtime's own reaper, automatic
//! heartbeats keeping a slow task, manual heartbeats keeping and losing a lease.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{ErrorKind, Status};
use taskgate_worker::{Config, JobContext, JobError, QueueConfig};

use crate::jobs::{Calls, Gate, Work};
use crate::{eventually, task_until, within, World};

fn queue(config: QueueConfig) -> Config {
    Config::new().queue("work", config)
}

/// A task whose handler hangs without heartbeats (TTL 200 ms, fake clock): each +201 ms the
/// runtime's reaper takes it back; the third expiry fails it "lease expired 3 times".
pub async fn w13_poison_lease_cap(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let config =
        queue(QueueConfig::workers(3).manual_heartbeat().lease_ttl(Duration::from_millis(200)));
    let rt = world
        .start(move |b| {
            b.config(config).stop_timeout(Duration::from_secs(5)).register(
                move |_job: Work, ctx: JobContext| {
                    c.hit();
                    async move {
                        ctx.cancelled().await;
                        Err::<u32, _>(JobError::msg("stopped"))
                    }
                },
            )
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 1 }).await?;
    for lost in 0..3u32 {
        let run = lost as usize + 1;
        eventually(&format!("run {run} started"), || async { Ok(calls.get() == run) }).await?;
        task_until(&client, id.as_str(), "running", |t| {
            t.status == Status::Running && t.lease_lost == lost
        })
        .await?;
        world.advance(Duration::from_millis(201));
    }
    let t = task_until(&client, id.as_str(), "failed", |t| t.status == Status::Failed).await?;
    assert_eq!((t.last_error.as_str(), t.lease_lost, t.attempts), ("lease expired 3 times", 3, 0));
    let report = rt.shutdown(Duration::ZERO).await?;
    // The three stale runs lost their leases: nothing was requeued or written for them.
    assert!(report.grace_elapsed, "{report:?}");
    assert_eq!((report.lease_lost, report.requeued, report.finished_after_grace), (3, 0, 0));
    assert_eq!(
        client.get(id.as_str()).await?.status,
        Status::Failed,
        "stale writes change nothing"
    );
    world.finish().await
}

/// Automatic heartbeats (every TTL/3) keep a 1.5 s lease through a handler that runs 4.5 s:
/// LeaseLost 0. Time is the world's manual clock, moved 100 ms at a time, and each step waits
/// until the lease is again more than 900 ms ahead (a heartbeat landed when one was due)
/// before time moves on: no delay of a loaded machine can make a heartbeat late, and a runtime
/// that does not heartbeat never gets its lease ahead again (the wait fails).
pub async fn w14_slow_task_auto_renew(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let (calls, gate) = (Calls::default(), Gate::default());
    let config = queue(QueueConfig::workers(1).lease_ttl(Duration::from_millis(1_500)));
    let (c, g) = (calls.clone(), gate.clone());
    let rt = world
        .start(move |b| {
            b.config(config).register(move |job: Work, _ctx| {
                let (_, g) = (c.hit(), g.clone());
                async move {
                    g.pass().await;
                    Ok::<_, JobError>(job.n)
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 3 }).await?;
    // The heartbeat ticker exists once the handler runs (it is made before the handler is
    // first polled), with its ticks fixed on the manual clock.
    eventually("the handler started", || async { Ok(calls.get() == 1) }).await?;
    for _ in 0..45 {
        world.advance(Duration::from_millis(100));
        let ahead = world.now().saturating_add(Duration::from_millis(900));
        eventually("a lease more than 900 ms ahead (kept by heartbeats)", || async {
            let t = client.get(id.as_str()).await?;
            Ok(t.status == Status::Running && t.lease_expires_at.is_some_and(|at| at > ahead))
        })
        .await?;
    }
    gate.open();
    assert_eq!(within("wait", client.wait(&id)).await??, 3);
    let t = client.get(id.as_str()).await?;
    assert_eq!((t.lease_lost, t.attempts), (0, 0));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// `renew_lease` works in automatic mode too.
pub async fn w29_renew_lease_auto(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world
        .start(|b| {
            b.register(|job: Work, ctx: JobContext| async move {
                ctx.renew_lease().await.map_err(JobError::retry)?;
                Ok::<_, JobError>(job.n)
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 2 }).await?;
    assert_eq!(within("wait", client.wait(&id)).await??, 2);
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Manual heartbeats every 250 ms keep an 800 ms lease through a 2.5 s handler: LeaseLost 0.
/// The handler moves the world's manual clock itself before each renewal, so the lease's
/// margin is the clock's, never the machine's (under load a real-time sleep between renewals
/// could outlast the lease). After each move the handler yields for a moment so that the
/// runtime's reaper looks at the new time: a `renew_lease` that kept nothing gets the task
/// reaped (LeaseLost ≥ 1).
pub async fn w30_manual_heartbeat_keepalive(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let clock = world.clock.clone().ok_or("w30 needs the manual clock")?;
    let config =
        queue(QueueConfig::workers(1).manual_heartbeat().lease_ttl(Duration::from_millis(800)));
    let rt = world
        .start(move |b| {
            b.config(config).register(move |job: Work, ctx: JobContext| {
                let clock = clock.clone();
                async move {
                    for _ in 0..10 {
                        clock.advance(Duration::from_millis(250));
                        tokio::time::sleep(Duration::from_millis(10)).await;
                        ctx.renew_lease().await.map_err(JobError::retry)?;
                    }
                    Ok::<_, JobError>(job.n)
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 7 }).await?;
    assert_eq!(within("wait", client.wait(&id)).await??, 7);
    assert_eq!(client.get(id.as_str()).await?.lease_lost, 0);
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// What the stale handler's `renew_lease` returned, and whether its token was cancelled.
type StaleRenewal = (Option<ErrorKind>, bool);

/// A manual-heartbeat handler that stalls past its lease (fake clock) is reaped (LeaseLost 1)
/// and the task runs again; the stale handler's `renew_lease` is `LeaseLost` with its
/// token cancelled, and only the second run's result is stored.
pub async fn w31_manual_heartbeat_reaped(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let gate = Gate::default();
    let seen: Arc<Mutex<Option<StaleRenewal>>> = Arc::default();
    let config =
        queue(QueueConfig::workers(2).manual_heartbeat().lease_ttl(Duration::from_millis(800)));
    let (c, g, s) = (calls.clone(), gate.clone(), seen.clone());
    let rt = world
        .start(move |b| {
            b.config(config).register(move |_job: Work, ctx: JobContext| {
                let (call, g, s) = (c.hit(), g.clone(), s.clone());
                async move {
                    if call == 1 {
                        g.pass().await;
                        let renewed = ctx.renew_lease().await;
                        *s.lock().unwrap_or_else(|p| p.into_inner()) =
                            Some((renewed.err().and_then(|e| e.broker_kind()), ctx.is_cancelled()));
                    }
                    Ok::<_, JobError>(u32::try_from(call).unwrap_or(0))
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 0 }).await?;
    eventually("first run started", || async { Ok(calls.get() == 1) }).await?;
    world.advance(Duration::from_millis(801));
    let t =
        task_until(&client, id.as_str(), "completed by run 2", |t| t.status == Status::Completed)
            .await?;
    assert_eq!((t.result.as_deref(), t.lease_lost), (Some(&b"2"[..]), 1));
    gate.open();
    eventually("stale run finished", || async {
        Ok(seen.lock().unwrap_or_else(|p| p.into_inner()).is_some())
    })
    .await?;
    let stale = *seen.lock().unwrap_or_else(|p| p.into_inner());
    assert_eq!(stale, Some((Some(ErrorKind::LeaseLost), true)));
    rt.shutdown(Duration::from_secs(5)).await?;
    let t = client.get(id.as_str()).await?;
    assert_eq!((t.result.as_deref(), t.lease_lost), (Some(&b"2"[..]), 1), "run 2's result wins");
    world.finish().await
}
