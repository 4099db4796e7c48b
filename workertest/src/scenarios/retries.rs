//! Retries as the runtime executes them (runtime spec §12.4 step 7): business failures with
//! back-off, throttles with their retry-after, skip, skip wrapping a throttle, the throttle
//! cap, and panics.

use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{Clock, Status};
use taskgate_worker::{Config, Error, JobError, SubmitOptions};

use crate::jobs::{Calls, Work};
use crate::{task_until, within, World};

/// Fail, fail, succeed (fake clock, real back-off): completed with attempts 2 after 3 calls.
pub async fn w08_retry_chain(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let rt = world
        .start(move |b| {
            b.register(move |job: Work, _ctx| {
                let call = c.hit();
                async move {
                    match call {
                        1 | 2 => Err(JobError::msg(format!("boom {call}"))),
                        _ => Ok(job.n),
                    }
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 5 }).await?;
    for (attempts, backoff_max) in [(1, 1_200), (2, 2_400)] {
        let t = task_until(&client, id.as_str(), "retrying", |t| {
            t.status == Status::Retrying && t.attempts == attempts
        })
        .await?;
        assert_eq!(t.last_error, format!("boom {attempts}"));
        let waits = t.run_at.duration_since(world.clock.as_ref().ok_or("clock")?.now_ms());
        assert!(waits <= Duration::from_millis(backoff_max), "back-off {waits:?}");
        assert!(waits >= Duration::from_millis(backoff_max * 2 / 3 - 1), "back-off {waits:?}");
        world.advance_when_waiting(Duration::from_millis(backoff_max)).await?;
    }
    assert_eq!(within("result", client.wait(&id)).await??, 5);
    let done = client.get(id.as_str()).await?;
    assert_eq!((done.attempts, calls.get()), (2, 3));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Throttled three times, then success: attempts 0, throttled 3.
pub async fn w09_throttled_then_success(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let rt = world
        .start(move |b| {
            b.register(move |job: Work, _ctx| {
                let call = c.hit();
                async move {
                    match call {
                        1..=3 => Err(JobError::throttled(Duration::from_secs(3))),
                        _ => Ok(job.n),
                    }
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 9 }).await?;
    for throttled in 1..=3 {
        let t = task_until(&client, id.as_str(), "throttled", |t| {
            t.status == Status::Retrying && t.throttled == throttled
        })
        .await?;
        assert_eq!(t.last_error, "throttled, retry after 3s");
        world.advance_when_waiting(Duration::from_secs(3)).await?;
    }
    assert_eq!(within("result", client.wait(&id)).await??, 9);
    let done = client.get(id.as_str()).await?;
    assert_eq!((done.attempts, done.throttled, calls.get()), (0, 3, 4));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Skip fails at once: one call, attempts 0, the error text kept.
pub async fn w10_skip_retry(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let rt = world
        .start(move |b| {
            b.register(move |_job: Work, _ctx| {
                c.hit();
                async { Err::<u32, _>(JobError::skip(std::io::Error::other("bad address"))) }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 1 }).await?;
    let failed = within("wait", client.wait(&id)).await?;
    assert!(
        matches!(&failed, Err(Error::TaskFailed { status: Status::Failed, last_error, .. })
        if last_error == "skip retry: bad address"),
        "{failed:?}"
    );
    let t = client.get(id.as_str()).await?;
    assert_eq!((t.attempts, t.throttled, calls.get()), (0, 0, 1));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A handler error whose text holds a NUL (which no store keeps: contract §E7.3) is written
/// with U+FFFD in its place instead of being refused: failed at once, the text otherwise kept.
pub async fn w50_error_text_with_nul(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world
        .start(|b| {
            b.register(|_job: Work, _ctx| async {
                Err::<u32, _>(JobError::skip(std::io::Error::other("bad\0address")))
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 1 }).await?;
    let _ = within("wait", client.wait(&id)).await?;
    let t = client.get(id.as_str()).await?;
    assert_eq!((t.status, t.attempts), (Status::Failed, 0));
    assert_eq!(t.last_error, "skip retry: bad\u{fffd}address");
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Skip wrapping a throttle is a skip: failed at once, throttled 0.
pub async fn w11_skip_wraps_throttled(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world
        .start(|b| {
            b.register(|_job: Work, _ctx| async {
                Err::<u32, _>(JobError::skip(JobError::throttled(Duration::from_secs(1))))
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 1 }).await?;
    let _ = within("wait", client.wait(&id)).await?;
    let t = client.get(id.as_str()).await?;
    assert_eq!((t.status, t.throttled, t.attempts), (Status::Failed, 0, 0));
    assert_eq!(t.last_error, "skip retry: throttled, retry after 1s");
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// With `throttled_max: 2` the second throttle fails the task: "throttled 2 times".
pub async fn w12_throttled_cap(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let config = Config { throttled_max: 2, ..Config::default() };
    let rt = world
        .start(|b| {
            b.config(config).register(|_job: Work, _ctx| async {
                Err::<u32, _>(JobError::throttled(Duration::from_secs(1)))
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Work { n: 1 }).await?;
    task_until(&client, id.as_str(), "throttled once", |t| {
        t.throttled == 1 && t.status == Status::Retrying
    })
    .await?;
    world.advance_when_waiting(Duration::from_secs(1)).await?;
    let t = task_until(&client, id.as_str(), "failed", |t| t.status == Status::Failed).await?;
    assert_eq!((t.last_error.as_str(), t.throttled, t.attempts), ("throttled 2 times", 2, 0));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A panic is a business failure "handler panic: …" and is retried.
pub async fn w40_panic_is_business_failure(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let rt = world
        .start(move |b| {
            b.retry_delay(|_| Duration::ZERO).register(move |job: Work, _ctx| {
                let call = c.hit();
                async move {
                    if call == 1 {
                        panic!("boom");
                    }
                    Ok::<_, JobError>(job.n)
                }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit_with(Work { n: 4 }, SubmitOptions::new().max_retry(1)).await?;
    assert_eq!(within("wait", client.wait(&id)).await??, 4);
    let t = client.get(id.as_str()).await?;
    assert_eq!((t.attempts, t.last_error.as_str(), calls.get()), (1, "handler panic: boom", 2));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}
