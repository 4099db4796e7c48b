//! Dependencies through the runtime: a pipeline reading its parents' results, fan-in in one
//! group, ignore-parent-failure, a parent finished before the child is submitted, fail-fast
//! cascades and a missing parent.

use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{ErrorKind, Status};
use taskgate_worker::{Error, JobContext, JobError, JobId, Runtime, SubmitOptions};

use super::kind_of;
use crate::jobs::{Stage, Work};
use crate::{within, World};

/// A `Stage` handler: its own number plus the outputs of its completed parents (a failed
/// parent adds nothing).
async fn stage(job: Stage, ctx: JobContext) -> Result<u32, JobError> {
    let mut sum = job.n;
    for parent in ctx.parents() {
        match ctx.client().wait(&JobId::<Stage>::from_raw(parent.clone())).await {
            Ok(n) => sum += n,
            Err(Error::TaskFailed { .. }) => {}
            Err(e) => return Err(JobError::retry(e)),
        }
    }
    Ok(sum)
}

async fn stages(world: &World) -> crate::TestResult<Runtime> {
    world.start(|b| b.register(stage)).await
}

/// Three stages A → B → C, each reading its parent's result: C sees A's and B's work.
pub async fn w15_pipeline_parent_results(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = stages(&world).await?;
    let client = rt.client();
    let a = client.submit(Stage { n: 1 }).await?;
    let b = client.submit_with(Stage { n: 10 }, SubmitOptions::new().depends_on(&a)).await?;
    let c = client.submit_with(Stage { n: 100 }, SubmitOptions::new().depends_on(&b)).await?;
    assert_eq!(within("pipeline", client.wait(&c)).await??, 111);
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// Fan-in in one group: a child of three parents starts after all three finished.
pub async fn w16_fan_in_group(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = stages(&world).await?;
    let client = rt.client();
    let mut group = client.group();
    let parents: Vec<JobId<Stage>> =
        (1..=3).map(|n| group.add(Stage { n }, SubmitOptions::new())).collect();
    let opts = parents.iter().fold(SubmitOptions::new(), |o, p| o.depends_on(p));
    let child = group.add(Stage { n: 1000 }, opts);
    let stored = group.submit().await?;
    assert_eq!(stored[3].status, Status::Blocked);
    assert_eq!(within("fan-in", client.wait(&child)).await??, 1006);
    let started = client.get(child.as_str()).await?.started_at.ok_or("child never started")?;
    for p in &parents {
        let finished = client.get(p.as_str()).await?.finished_at.ok_or("parent not finished")?;
        assert!(finished <= started, "the child started before parent {p} finished");
    }
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

fn failing_worker(b: taskgate_worker::Builder) -> taskgate_worker::Builder {
    b.register(|_job: Work, _ctx| async {
        Err::<u32, _>(JobError::skip(JobError::msg("parent broke")))
    })
    .register(stage)
}

/// A failed parent: its ignore-parent-failure child still runs; its fail-fast child is
/// cancelled "parent `<id>` failed".
pub async fn w17_ignore_parent_failure(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world.start(failing_worker).await?;
    let client = rt.client();
    let mut group = client.group();
    let parent = group.add(Work { n: 0 }, SubmitOptions::new());
    let tolerant =
        group.add(Stage { n: 5 }, SubmitOptions::new().depends_on(&parent).ignore_parent_failure());
    let strict = group.add(Stage { n: 6 }, SubmitOptions::new().depends_on(&parent));
    group.submit().await?;
    assert_eq!(
        within("tolerant", client.wait_task(tolerant.as_str())).await??.status,
        Status::Completed
    );
    let strict = within("strict", client.wait_task(strict.as_str())).await?;
    assert!(
        matches!(&strict, Err(Error::TaskFailed { status: Status::Canceled, last_error, .. })
        if *last_error == format!("parent {parent} failed")),
        "{strict:?}"
    );
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A child submitted after its parent completed is pending at once and runs; a fail-fast
/// child submitted after its parent failed is cancelled at once.
pub async fn w18_parent_done_at_submit(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world.start(failing_worker).await?;
    let client = rt.client();
    let done = client.submit(Stage { n: 2 }).await?;
    within("parent", client.wait(&done)).await??;
    let child = client.submit_with(Stage { n: 3 }, SubmitOptions::new().depends_on(&done)).await?;
    assert_eq!(within("child", client.wait(&child)).await??, 5);
    let broken = client.submit(Work { n: 0 }).await?;
    let _ = within("failing parent", client.wait(&broken)).await?;
    let late = client.submit_with(Stage { n: 4 }, SubmitOptions::new().depends_on(&broken)).await?;
    let t = client.get(late.as_str()).await?;
    assert_eq!((t.status, t.last_error), (Status::Canceled, format!("parent {broken} failed")));
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A ← B ← C, A fails: B is cancelled "parent A failed", C "parent B canceled".
pub async fn w19_fail_fast_cascade(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = world.start(failing_worker).await?;
    let client = rt.client();
    let mut group = client.group();
    let a = group.add(Work { n: 0 }, SubmitOptions::new());
    let b = group.add(Stage { n: 1 }, SubmitOptions::new().depends_on(&a));
    let c = group.add(Stage { n: 2 }, SubmitOptions::new().depends_on(&b));
    group.submit().await?;
    let waited = within("C", client.wait(&c)).await?;
    assert!(matches!(waited, Err(Error::TaskFailed { status: Status::Canceled, .. })));
    let (tb, tc) = (client.get(b.as_str()).await?, client.get(c.as_str()).await?);
    assert_eq!(tb.last_error, format!("parent {a} failed"));
    assert_eq!(tc.last_error, format!("parent {b} canceled"));
    assert!(tb.finished_at.is_some() && tc.finished_at.is_some());
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A parent that does not exist: `NotFound`, nothing stored.
pub async fn w20_missing_parent(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let rt = stages(&world).await?;
    let client = rt.client();
    let ghost = "01ZZZZZZZZZZZZZZZZZZZZZZZZ";
    let submitted =
        client.submit_with(Stage { n: 1 }, SubmitOptions::new().depends_on(ghost)).await;
    assert_eq!(kind_of(&submitted), Some(ErrorKind::NotFound));
    let mut group = client.group();
    let ok = group.add(Stage { n: 1 }, SubmitOptions::new());
    group.add(Stage { n: 2 }, SubmitOptions::new().depends_on(ghost));
    assert_eq!(kind_of(&group.submit().await), Some(ErrorKind::NotFound));
    assert_eq!(
        kind_of(&client.get(ok.as_str()).await),
        Some(ErrorKind::NotFound),
        "all or nothing"
    );
    assert!(client.overview().await?.is_empty());
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}
