//! Cancelling through the runtime: a running stage of a pipeline, a running task here (at
//! once) and from another process (at its next heartbeat), a blocked task, a final task.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{ErrorKind, Status};
use taskgate_worker::{Config, Error, JobContext, JobError, QueueConfig, SubmitOptions};

use super::kind_of;
use crate::jobs::{Calls, Gate, Stage, Work};
use crate::{eventually, task_until, within, World};

/// `Work` waits for cancellation (then returns success anyway); `Stage` waits for `gate`.
fn holders(
    gate: Gate,
    saw_cancel: Arc<AtomicBool>,
) -> impl FnOnce(taskgate_worker::Builder) -> taskgate_worker::Builder {
    move |b| {
        b.register(move |job: Work, ctx: JobContext| {
            let saw = saw_cancel.clone();
            async move {
                ctx.cancelled().await;
                saw.store(true, Ordering::SeqCst);
                Ok::<_, JobError>(job.n)
            }
        })
        .register(move |job: Stage, _ctx| {
            let gate = gate.clone();
            async move {
                gate.pass().await;
                Ok::<_, JobError>(job.n)
            }
        })
    }
}

/// Pipeline A (done) → B (running) → C (blocked): cancelling B stops its handler, B ends
/// cancelled even though its handler returned success, C is cancelled "parent B canceled".
pub async fn w21_cancel_mid_pipeline(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let saw = Arc::new(AtomicBool::new(false));
    let gate = Gate::default();
    gate.open();
    let rt = world.start(holders(gate, saw.clone())).await?;
    let client = rt.client();
    let a = client.submit(Stage { n: 1 }).await?;
    let b = client.submit_with(Work { n: 2 }, SubmitOptions::new().depends_on(&a)).await?;
    let c = client.submit_with(Stage { n: 3 }, SubmitOptions::new().depends_on(&b)).await?;
    task_until(&client, b.as_str(), "B running", |t| t.status == Status::Running).await?;
    client.cancel(b.as_str()).await?;
    let waited = within("B", client.wait(&b)).await?;
    assert!(
        matches!(waited, Err(Error::TaskFailed { status: Status::Canceled, .. })),
        "{waited:?}"
    );
    assert!(saw.load(Ordering::SeqCst), "B's handler saw the cancel");
    let tc =
        task_until(&client, c.as_str(), "C cancelled", |t| t.status == Status::Canceled).await?;
    assert_eq!(tc.last_error, format!("parent {b} canceled"));
    assert_eq!(client.get(a.as_str()).await?.status, Status::Completed);
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A local cancel reaches the running handler at once; `wait` returns `TaskFailed`
/// (canceled).
pub async fn w22_cancel_running_local(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let saw = Arc::new(AtomicBool::new(false));
    let rt = world.start(holders(Gate::default(), saw.clone())).await?;
    let client = rt.client();
    let id = client.submit(Work { n: 1 }).await?;
    task_until(&client, id.as_str(), "running", |t| t.status == Status::Running).await?;
    client.cancel(id.as_str()).await?;
    let waited = within("wait", client.wait(&id)).await?;
    assert!(
        matches!(&waited, Err(Error::TaskFailed { status: Status::Canceled, last_error, .. })
        if last_error == "canceled"),
        "{waited:?}"
    );
    assert!(saw.load(Ordering::SeqCst));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A cancel from another process is seen at the next heartbeat (lease 900 ms: every 300 ms).
/// Time is the world's manual clock: the handler runs, the other process cancels, and one
/// move of 301 ms makes the heartbeat due — well inside the lease, however late a loaded
/// machine runs it.
pub async fn w23_cancel_running_remote(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let (saw, started) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
    let config =
        Config::new().queue("work", QueueConfig::workers(1).lease_ttl(Duration::from_millis(900)));
    let (s, st) = (saw.clone(), started.clone());
    let rt = world
        .start(move |b| {
            b.config(config).register(move |job: Work, ctx: JobContext| {
                let (saw, started) = (s.clone(), st.clone());
                async move {
                    started.store(true, Ordering::SeqCst);
                    ctx.cancelled().await;
                    saw.store(true, Ordering::SeqCst);
                    Ok::<_, JobError>(job.n)
                }
            })
        })
        .await?;
    let other_rt = world.start(|b| b).await?;
    let other = other_rt.client();
    let id = rt.client().submit(Work { n: 1 }).await?;
    // The heartbeat ticker is made before the handler is first polled: once the handler ran,
    // its first tick is fixed 300 ms after the claim on the manual clock.
    eventually("the handler started", || async { Ok(started.load(Ordering::SeqCst)) }).await?;
    other.cancel(id.as_str()).await?;
    world.advance(Duration::from_millis(301));
    let t = task_until(&other, id.as_str(), "cancelled", |t| t.status == Status::Canceled).await?;
    assert_eq!((t.last_error.as_str(), t.lease_lost), ("canceled", 0));
    assert!(saw.load(Ordering::SeqCst), "the handler's token was cancelled");
    rt.shutdown(Duration::from_secs(5)).await?;
    other_rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Cancelling a blocked task cancels its blocked child; the running parent is unaffected.
pub async fn w24_cancel_blocked_propagates(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let gate = Gate::default();
    let rt = world.start(holders(gate.clone(), Arc::default())).await?;
    let client = rt.client();
    let a = client.submit(Stage { n: 1 }).await?;
    let b = client.submit_with(Stage { n: 2 }, SubmitOptions::new().depends_on(&a)).await?;
    let c = client.submit_with(Stage { n: 3 }, SubmitOptions::new().depends_on(&b)).await?;
    task_until(&client, a.as_str(), "A running", |t| t.status == Status::Running).await?;
    client.cancel(b.as_str()).await?;
    let tc = client.get(c.as_str()).await?;
    assert_eq!((tc.status, tc.last_error), (Status::Canceled, format!("parent {b} canceled")));
    gate.open();
    assert_eq!(within("A", client.wait(&a)).await??, 1);
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Cancelling a finished task is `AlreadyFinal`.
pub async fn w25_cancel_final(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let calls = Calls::default();
    let c = calls.clone();
    let rt = world
        .start(move |b| {
            b.register(move |job: Stage, _ctx| {
                c.hit();
                async move { Ok::<_, JobError>(job.n) }
            })
        })
        .await?;
    let client = rt.client();
    let id = client.submit(Stage { n: 1 }).await?;
    within("wait", client.wait(&id)).await??;
    assert_eq!(kind_of(&client.cancel(id.as_str()).await), Some(ErrorKind::AlreadyFinal));
    assert_eq!(calls.get(), 1);
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}
