//! Claiming ahead (`QueueConfig::prefetch`): tasks claimed beyond the free workers are held
//! locally, returned unchanged at shutdown, never claimed ahead on a gated queue, and never
//! started once their cancel is known.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use brokertest::{CaseResult, Factory};
use taskgate::{Filter, Status, Task};
use taskgate_worker::{Config, JobContext, JobError, QueueConfig, SubmitOptions};

use super::count;
use crate::jobs::{Calls, Gate, Work};
use crate::{eventually, within, TestResult, World};

/// Fast tasks first, then ones that block until cancelled.
const FAST: u32 = 200;
const TOTAL: u32 = 300;

/// Submits `TOTAL` `Work` tasks (n = 0..TOTAL, in one group; the slow ones at priority 1 so
/// every fast one is claimed first) from a producer-only runtime;
/// returns each stored task's `n` and snapshot by ID.
async fn fill(world: &World) -> crate::TestResult<HashMap<String, (u32, Task)>> {
    let producer = world.start(|b| b.config(Config::new())).await?;
    let client = producer.client();
    let mut group = client.group();
    let ns: Vec<(String, u32)> = (0..TOTAL)
        .map(|n| {
            // The fast tasks claim first whatever the IDs' order within one millisecond.
            let options = SubmitOptions::new().priority(i16::from(n >= FAST));
            (group.add(Work { n }, options).to_string(), n)
        })
        .collect();
    let stored: HashMap<String, Task> =
        group.submit().await?.into_iter().map(|t| (t.id.clone(), t)).collect();
    producer.shutdown(Duration::from_secs(5)).await?;
    let mut out = HashMap::new();
    for (id, n) in ns {
        let task = stored.get(&id).cloned().ok_or_else(|| format!("task {n} not stored"))?;
        out.insert(id, (n, task));
    }
    Ok(out)
}

/// The handler both scenarios run: a fast task (n < `FAST`) counts in `fast` and succeeds; a
/// slow one counts in `slow` and blocks until cancelled.
async fn fast_or_block(
    job: Work,
    ctx: JobContext,
    fast: Calls,
    slow: Calls,
) -> Result<u32, JobError> {
    if job.n < FAST {
        fast.hit();
        return Ok(job.n);
    }
    slow.hit();
    ctx.cancelled().await;
    Err(JobError::msg("interrupted"))
}

/// One worker, fast handlers, then one that blocks: the runtime claims ahead (more `Work`
/// tasks are `running` in the broker than there are workers, and `stats` shows them held).
/// Shutdown with a short grace requeues the interrupted one and every held one with
/// attempts, lease-lost and throttled counters 0 and `run_at` unchanged; no task is left
/// running, no held task's handler ever ran, every handler that ran was acked, and a later
/// runtime runs every requeued task.
pub async fn w45_claimed_ahead_requeued_on_shutdown(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let before = fill(&world).await?;
    let (fast, slow) = (Calls::default(), Calls::default());
    let (f, s) = (fast.clone(), slow.clone());
    let config = Config::new().queue("work", QueueConfig::workers(1).prefetch(64));
    let rt = world
        .start(move |b| {
            b.config(config).register(move |job: Work, ctx: JobContext| {
                fast_or_block(job, ctx, f.clone(), s.clone())
            })
        })
        .await?;
    let client = rt.client();
    eventually("the blocking handler started", || async { Ok(slow.get() == 1) }).await?;
    eventually("tasks held ahead of the one worker", || async {
        let stats = client.stats("work").await?;
        let running = count(&client, "work", Status::Running).await?;
        Ok(stats.running == 1 && stats.claimed_ahead > 0 && running > 1)
    })
    .await?;
    let held = client.stats("work").await?.claimed_ahead;
    assert!(held <= 64, "at most prefetch held: {held}");
    let report = rt.shutdown(Duration::from_millis(300)).await?;
    assert!(report.grace_elapsed && report.requeued == 1, "{report:?}");
    assert!(report.held_requeued >= 1, "the held tasks are reported requeued: {report:?}");
    assert_eq!(client.stats("work").await?.claimed_ahead, 0, "nothing held after shutdown");
    // Two claims may be in flight: one that skipped the fast tasks another held locked can
    // land first with slow ones, so a few fast tasks may still be held when the one worker
    // blocks. Those are returned like the slow ones; none of them ran.
    let ran = fast.get();
    assert_eq!(slow.get(), 1, "no held task ran");
    assert!(ran > 0, "fast tasks ran before the blocking one");
    let all = client.list(&Filter { task_type: "work".into(), ..Filter::default() }).await?;
    assert_eq!(all.len(), TOTAL as usize);
    let (mut pending, mut completed) = (0, 0);
    for t in &all {
        let (n, stored) = before.get(&t.id).ok_or_else(|| format!("unknown task {}", t.id))?;
        let n = *n;
        if t.status == Status::Completed {
            assert!(n < FAST, "task {n}: only fast tasks completed");
            completed += 1;
            continue;
        }
        pending += 1;
        assert_eq!(t.status, Status::Pending, "task {n} returned");
        assert_eq!((t.attempts, t.lease_lost, t.throttled), (0, 0, 0), "task {n}: counters");
        assert_eq!(t.run_at, stored.run_at, "task {n}: run_at unchanged");
    }
    assert_eq!(completed, ran, "every handler that ran was acked (the completer flushed)");
    assert_eq!(pending, TOTAL as usize - ran);
    // A later runtime runs every returned task.
    let config = Config::new().queue("work", QueueConfig::workers(4));
    let rerun = world
        .start(move |b| b.config(config).register(|job: Work, _ctx| async move { Ok(job.n) }))
        .await?;
    let c2 = rerun.client();
    eventually("every task completed", || async {
        Ok(count(&c2, "work", Status::Completed).await? == u64::from(TOTAL))
    })
    .await?;
    rerun.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// `prefetch(0)` and a rate-limited queue never claim ahead: with one worker blocked, the
/// broker holds exactly one `Work` task `running` while more wait.
pub async fn w46_no_claim_ahead_when_off_or_gated(factory: &dyn Factory) -> CaseResult {
    for (what, queue) in [
        ("prefetch 0", QueueConfig::workers(1).prefetch(0)),
        ("rps 1000", QueueConfig::workers(1).rps(1000.0)),
    ] {
        let world = World::new(factory).await?;
        fill(&world).await?;
        let slow = Calls::default();
        let s = slow.clone();
        let config = Config::new().queue("work", queue);
        let rt = world
            .start(move |b| {
                b.config(config).register(move |job: Work, ctx: JobContext| {
                    fast_or_block(job, ctx, Calls::default(), s.clone())
                })
            })
            .await?;
        let client = rt.client();
        eventually("the blocking handler started", || async { Ok(slow.get() == 1) }).await?;
        // Give a claim-ahead every chance to happen before looking.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let running = count(&client, "work", Status::Running).await?;
        assert_eq!(running, 1, "{what}: one task running, none held");
        assert_eq!(client.stats("work").await?.claimed_ahead, 0, "{what}");
        let report = within(what, rt.shutdown(Duration::from_millis(100))).await??;
        assert!(report.grace_elapsed, "{what}: {report:?}");
        assert_eq!((report.requeued, report.held_requeued), (1, 0), "{what}: {report:?}");
        let pending = count(&client, "work", Status::Pending).await?;
        assert_eq!(pending, u64::from(TOTAL - FAST), "{what}: the rest pending");
        world.finish().await?;
    }
    Ok(())
}

/// The `Work` tasks held ahead by `client`'s runtime now, once every claim landed (the broker's
/// `running` tasks are the one blocked handler's and the held ones); `blocker` aside.
async fn held_now(client: &taskgate_worker::Client, blocker: &str) -> TestResult<Vec<String>> {
    eventually("tasks held ahead of the blocked worker, every claim landed", || async {
        let held = client.stats("work").await?.claimed_ahead;
        let running = count(client, "work", Status::Running).await?;
        Ok(held > 0 && u64::try_from(held).is_ok_and(|held| running == held + 1))
    })
    .await?;
    let filter =
        Filter { task_type: "work".into(), status: Some(Status::Running), ..Filter::default() };
    let held: Vec<String> =
        client.list(&filter).await?.into_iter().map(|t| t.id).filter(|id| id != blocker).collect();
    assert_eq!(held.len(), client.stats("work").await?.claimed_ahead, "held: {held:?}");
    Ok(held)
}

/// A held task whose cancel is known is finished as cancelled without running its handler.
/// One worker (prefetch 8, manual clock) runs fast tasks, then one that blocks on a gate, so
/// later tasks wait claimed ahead in its buffer. Every task held then is cancelled through the
/// runtime's own client: each is `canceled` ("canceled") when `cancel` returns. The buffer
/// refills; every task held then is cancelled through another runtime (another process), and
/// the clock moves one heartbeat period (TTL / 3), when the held tasks' lease renewal answers
/// `Canceled`: each becomes `canceled` while the worker is still blocked. The gate opens:
/// every other task completes, and no cancelled task's handler ever ran.
pub async fn w51_held_task_cancelled_not_run(factory: &dyn Factory) -> CaseResult {
    const FAST: u32 = 100;
    const BLOCKER: u32 = FAST;
    const TOTAL: u32 = 200;
    let world = World::manual(factory).await?;
    let remote_rt = world.start(|b| b.config(Config::new())).await?;
    let remote = remote_rt.client();
    let mut group = remote.group();
    let mut by_id = HashMap::new();
    for n in 0..TOTAL {
        // Fast tasks first, then the blocker, then the ones that wait held.
        let priority = match n {
            n if n < FAST => 0,
            BLOCKER => 1,
            _ => 2,
        };
        by_id.insert(group.add(Work { n }, SubmitOptions::new().priority(priority)).to_string(), n);
    }
    group.submit().await?;
    let blocker = by_id.iter().find(|(_, n)| **n == BLOCKER).map(|(id, _)| id.clone());
    let blocker = blocker.ok_or("no blocker")?;

    let ran = Arc::new(Mutex::new(HashSet::new()));
    let (gate, blocked) = (Gate::default(), Calls::default());
    let (r, g, b) = (ran.clone(), gate.clone(), blocked.clone());
    let ttl = Duration::from_secs(60);
    let config = Config::new().queue("work", QueueConfig::workers(1).prefetch(8).lease_ttl(ttl));
    let rt = world
        .start(move |builder| {
            builder.config(config).register(move |job: Work, _ctx: JobContext| {
                let (ran, gate, blocked) = (r.clone(), g.clone(), b.clone());
                async move {
                    ran.lock().unwrap_or_else(|p| p.into_inner()).insert(job.n);
                    if job.n == BLOCKER {
                        blocked.hit();
                        gate.pass().await;
                    }
                    Ok::<_, JobError>(job.n)
                }
            })
        })
        .await?;
    let client = rt.client();
    eventually("the blocking handler started", || async { Ok(blocked.get() == 1) }).await?;

    // Cancelled here: finished before `cancel` returns.
    let local = held_now(&client, &blocker).await?;
    for id in &local {
        client.cancel(id).await?;
        let t = client.get(id).await?;
        assert_eq!(
            (t.status, t.last_error.as_str()),
            (Status::Canceled, "canceled"),
            "held task {} cancelled through its own runtime",
            by_id[id]
        );
    }
    // Cancelled elsewhere: known at the held tasks' next lease renewal.
    let elsewhere = held_now(&client, &blocker).await?;
    for id in &elsewhere {
        remote.cancel(id).await?;
    }
    world.advance(ttl / 3);
    for id in &elsewhere {
        let t = crate::task_until(&client, id, "cancelled while held", |t| {
            t.status == Status::Canceled
        })
        .await?;
        assert_eq!(t.last_error, "canceled", "held task {}", by_id[id]);
    }
    assert_eq!(blocked.get(), 1, "the worker was blocked throughout");

    gate.open();
    let cancelled: HashSet<&String> = local.iter().chain(&elsewhere).collect();
    let n_cancelled = u64::try_from(cancelled.len())?;
    let done = u64::from(TOTAL) - n_cancelled;
    eventually("every other task completed", || async {
        Ok(count(&client, "work", Status::Completed).await? == done)
    })
    .await?;
    let ran = ran.lock().unwrap_or_else(|p| p.into_inner()).clone();
    for id in &cancelled {
        assert!(!ran.contains(&by_id[*id]), "cancelled held task {} ran", by_id[*id]);
        assert_eq!(client.get(id).await?.status, Status::Canceled);
    }
    assert_eq!(ran.len(), TOTAL as usize - cancelled.len(), "every other task ran once");
    assert_eq!(count(&client, "work", Status::Canceled).await?, n_cancelled);
    rt.shutdown(Duration::from_secs(5)).await?;
    remote_rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}
