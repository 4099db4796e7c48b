//! The actors of one history round, each on its own broker handle: a producer that enqueues the
//! planned tasks (and cancels a few), workers that claim, heartbeat, ack, fail, requeue, crash
//! and drop futures at random, and a reaper that moves the clock and reaps.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use taskgate::{Broker, Clock, Error, FailKind, Failure, Filter, ManualClock, Task};

use super::record::{Act, Recorder, Res, Rng};
use crate::model::exec::CALL_LIMIT;

/// The two queues of a history.
pub(crate) const HISTORY_QUEUES: [&str; 2] = ["ha", "hb"];

/// One planned task: fan-in dependencies on earlier tasks.
#[derive(Clone, Debug)]
pub(crate) struct Planned {
    pub(crate) id: String,
    pub(crate) queue: &'static str,
    pub(crate) parents: Vec<String>,
    pub(crate) max_retry: u32,
}

/// `tasks` tasks: the first third are roots, every other depends on one to three earlier ones.
pub(crate) fn plan(tasks: usize, rng: &mut Rng) -> Vec<Planned> {
    let roots = (tasks / 3).max(1);
    let mut out: Vec<Planned> = Vec::new();
    for i in 0..tasks {
        let mut parents = Vec::new();
        if i >= roots {
            for _ in 0..=rng.below(3) {
                let parent = out[rng.below(out.len())].id.clone();
                if !parents.contains(&parent) {
                    parents.push(parent);
                }
            }
        }
        let queue = HISTORY_QUEUES[rng.below(2)];
        out.push(Planned { id: format!("h{i:02}"), queue, parents, max_retry: 2 });
    }
    out
}

/// What every actor shares.
#[derive(Debug)]
pub(crate) struct World {
    pub(crate) recorder: Recorder,
    pub(crate) clock: ManualClock,
    pub(crate) stop: AtomicBool,
    /// Expired leases the reaper handled.
    pub(crate) reaped: AtomicU64,
    /// Worker actions so far (the reaper's pace follows it).
    pub(crate) actions: AtomicU64,
    /// `actions` at the reaper's last tick (workers wait when they run too far ahead).
    pub(crate) ticked_at: AtomicU64,
    /// Calls that did not answer within their limit, and properties broken mid-run.
    pub(crate) hangs: std::sync::Mutex<Vec<String>>,
    /// Set when a call hung: every actor stops at its next step, so the round ends at once
    /// and reports the hang instead of waiting out every other call.
    pub(crate) hung: AtomicBool,
}

impl World {
    pub(crate) fn new(clock: ManualClock) -> Self {
        World {
            recorder: Recorder::default(),
            clock,
            stop: AtomicBool::new(false),
            reaped: AtomicU64::new(0),
            actions: AtomicU64::new(0),
            ticked_at: AtomicU64::new(0),
            hangs: Default::default(),
            hung: AtomicBool::new(false),
        }
    }

    /// Records a property broken mid-run.
    pub(crate) fn violation(&self, what: String) {
        self.hangs.lock().unwrap_or_else(|p| p.into_inner()).push(what);
    }

    /// Records a call that did not answer and stops every actor.
    pub(crate) fn hung(&self, what: String) {
        self.violation(what);
        self.halt();
    }

    /// Stops every actor at its next step.
    pub(crate) fn halt(&self) {
        self.hung.store(true, Ordering::SeqCst);
        self.stop.store(true, Ordering::SeqCst);
    }

    /// True once a call hung: actors stop.
    pub(crate) fn halted(&self) -> bool {
        self.hung.load(Ordering::SeqCst)
    }
}

/// Awaits `call`, or drops it after `drop_after` (the outcome is then unknown). A call not
/// dropped on purpose that does not answer within [`CALL_LIMIT`] is a hang: `what()` names the
/// actor, the call and its task, and every actor stops.
async fn call<T>(
    world: &World,
    what: impl FnOnce() -> String,
    drop_after: Option<Duration>,
    fut: impl Future<Output = taskgate::Result<T>>,
) -> Result<T, Res> {
    let limit = drop_after.unwrap_or(CALL_LIMIT);
    match tokio::time::timeout(limit, fut).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(Res::Err(e.kind())),
        Err(_) if drop_after.is_some() => Err(Res::Dropped),
        Err(_) => {
            world.hung(format!("{} did not answer within {CALL_LIMIT:?}", what()));
            Err(Res::Dropped)
        }
    }
}

fn res<T>(r: &Result<T, Res>) -> Res {
    r.as_ref().map_or_else(|e| *e, |_| Res::Ok)
}

/// Enqueues the plan in order with a yield between tasks, then cancels two tasks.
pub(crate) async fn producer(
    broker: Arc<dyn Broker>,
    world: Arc<World>,
    plan: Vec<Planned>,
    mut rng: Rng,
) {
    for p in &plan {
        if world.halted() {
            return;
        }
        let task = Task::new("h", p.queue)
            .with_id(p.id.clone())
            .with_depends_on(p.parents.clone())
            .with_max_retry(p.max_retry);
        let start = world.recorder.start();
        let r = call(&world, || format!("producer: enqueue {}", p.id), None, broker.enqueue(&task))
            .await;
        world.recorder.finish("producer", Act::Enqueue, &p.id, "", start, res(&r));
        tokio::task::yield_now().await;
    }
    for _ in 0..2 {
        let id = &plan[rng.below(plan.len())].id;
        let start = world.recorder.start();
        let r = call(&world, || format!("producer: cancel {id}"), None, broker.cancel(id)).await;
        world.recorder.finish("producer", Act::Cancel, id, "", start, res(&r));
    }
}

/// After every few worker actions (whatever the backend's speed), advances the clock 20 s —
/// a third of the lease TTL — and reaps, until told to stop.
pub(crate) async fn reaper(broker: Arc<dyn Broker>, world: Arc<World>, mut rng: Rng) {
    let mut pace = 4;
    while !world.stop.load(Ordering::SeqCst) {
        if world.actions.load(Ordering::SeqCst) < world.ticked_at.load(Ordering::SeqCst) + pace {
            tokio::task::yield_now().await;
            continue;
        }
        world.ticked_at.store(world.actions.load(Ordering::SeqCst), Ordering::SeqCst);
        pace = 4 + u64::try_from(rng.below(8)).unwrap_or(0);
        world.clock.advance(Duration::from_secs(20));
        snapshot_converged(&*broker, &world).await;
        let start = world.recorder.start();
        let r = call(&world, || "reaper: reap_expired".into(), None, broker.reap_expired()).await;
        if let Ok(n) = &r {
            world.reaped.fetch_add(*n, Ordering::SeqCst);
        }
        world.recorder.finish("reaper", Act::Reap, "", "", start, res(&r));
    }
}

/// A list is one atomic read and propagation is atomic with the write that finished a parent,
/// so every snapshot is converged — checked before each reap, whose repair would heal a miss.
async fn snapshot_converged(broker: &dyn Broker, world: &World) {
    let list = call(world, || "reaper: list".into(), None, broker.list(&Filter::default())).await;
    if let Ok(tasks) = list {
        for v in super::verify::converged(&tasks) {
            world.violation(format!("mid-run snapshot: {v}"));
        }
    }
}

/// One worker: `ops` random actions; returns the leases it still believes it holds.
pub(crate) struct Worker {
    pub(crate) name: String,
    pub(crate) broker: Arc<dyn Broker>,
    pub(crate) world: Arc<World>,
    pub(crate) rng: Rng,
    pub(crate) held: Vec<(String, String)>,
}

impl Worker {
    pub(crate) async fn run(mut self, ops: usize) -> Vec<(String, String)> {
        for _ in 0..ops {
            if self.world.halted() {
                break;
            }
            self.keep_pace().await;
            self.world.actions.fetch_add(1, Ordering::SeqCst);
            match self.rng.below(100) {
                0..=29 => self.claim().await,
                30..=36 => self.claim_and_drop().await,
                37..=54 => self.with_held(Act::Heartbeat).await,
                55..=68 => self.with_held(Act::Ack).await,
                69..=80 => self.with_held(Act::Fail).await,
                81..=86 => self.with_held(Act::Requeue).await,
                87..=90 => self.crash_one(),
                _ => tokio::task::yield_now().await,
            }
        }
        self.held
    }

    /// Waits while the workers are more than 12 actions ahead of the reaper's last tick.
    async fn keep_pace(&self) {
        let w = &self.world;
        while w.actions.load(Ordering::SeqCst) > w.ticked_at.load(Ordering::SeqCst) + 12
            && !w.stop.load(Ordering::SeqCst)
        {
            tokio::task::yield_now().await;
        }
    }

    fn drop_after(&mut self) -> Option<Duration> {
        let micros = u64::try_from(self.rng.below(400)).unwrap_or(0);
        self.rng.chance(12).then(|| Duration::from_micros(micros))
    }

    async fn claim(&mut self) {
        let queues: Vec<&str> = match self.rng.below(3) {
            0 => vec![HISTORY_QUEUES[0]],
            1 => vec![HISTORY_QUEUES[1]],
            _ => HISTORY_QUEUES.to_vec(),
        };
        let max = 1 + self.rng.below(2);
        let start = self.world.recorder.start();
        let what = || format!("{}: try_dequeue_many {queues:?}", self.name);
        let r = call(&self.world, what, None, self.broker.try_dequeue_many(&queues, max)).await;
        self.record_claims(start, r);
    }

    async fn claim_and_drop(&mut self) {
        let wait = Duration::from_millis(u64::try_from(self.rng.below(3)).unwrap_or(0));
        let start = self.world.recorder.start();
        let what = || format!("{}: dequeue", self.name);
        let r = call(&self.world, what, Some(wait), self.broker.dequeue(&HISTORY_QUEUES)).await;
        self.record_claims(start, r.map(|t| vec![t]));
    }

    fn record_claims(&mut self, start: u64, r: Result<Vec<Task>, Res>) {
        match r {
            Ok(tasks) if !tasks.is_empty() => {
                for t in tasks {
                    self.world.recorder.finish(
                        &self.name,
                        Act::Claim,
                        &t.id,
                        &t.lease_token,
                        start,
                        Res::Ok,
                    );
                    self.held.push((t.id, t.lease_token));
                }
            }
            other => self.world.recorder.finish(&self.name, Act::Claim, "", "", start, res(&other)),
        }
    }

    /// Forgets a lease without releasing it (a worker crash); the reaper must recover it.
    fn crash_one(&mut self) {
        if !self.held.is_empty() {
            let i = self.rng.below(self.held.len());
            self.held.swap_remove(i);
        }
    }

    async fn with_held(&mut self, act: Act) {
        if self.held.is_empty() {
            return;
        }
        let i = self.rng.below(self.held.len());
        let (id, token) = self.held[i].clone();
        let drop_after = self.drop_after();
        let start = self.world.recorder.start();
        let r = self.perform(act, &id, &token, drop_after).await;
        let outcome = res(&r);
        self.world.recorder.finish(&self.name, act, &id, &token, start, outcome);
        if outcome == Res::Err(taskgate::ErrorKind::Canceled) {
            self.finish_canceled(&id, &token).await;
        }
        let keep = matches!((act, outcome), (_, Res::Dropped) | (Act::Heartbeat, Res::Ok));
        if !keep {
            self.held.retain(|(h, t)| !(h == &id && t == &token));
        }
    }

    async fn perform(
        &mut self,
        act: Act,
        id: &str,
        token: &str,
        drop_after: Option<Duration>,
    ) -> Result<(), Res> {
        let failure = self.failure();
        let b = &self.broker;
        let w = &self.world;
        let what = || format!("{}: {act:?} {id}", self.name);
        match act {
            Act::Heartbeat => call(w, what, drop_after, b.heartbeat(id, token)).await,
            Act::Ack => call(w, what, drop_after, b.ack(id, token, None)).await,
            Act::Fail => call(w, what, drop_after, b.fail(id, token, failure)).await,
            _ => call(w, what, drop_after, b.requeue(id, token)).await,
        }
    }

    fn failure(&mut self) -> Failure {
        let now = self.world.clock.now_ms();
        match self.rng.below(3) {
            0 => Failure::skip("history skip"),
            1 => Failure::new(FailKind::Throttled, "history throttled", now),
            _ => Failure::business("history business", now),
        }
    }

    async fn finish_canceled(&mut self, id: &str, token: &str) {
        let start = self.world.recorder.start();
        let what = || format!("{}: finish_canceled {id}", self.name);
        let r = call(&self.world, what, None, self.broker.finish_canceled(id, token)).await;
        self.world.recorder.finish(&self.name, Act::FinishCanceled, id, token, start, res(&r));
    }
}

/// Requeues the leases a worker still believes it holds.
pub(crate) async fn release(
    broker: &dyn Broker,
    world: &World,
    name: &str,
    held: Vec<(String, String)>,
) {
    for (id, token) in held {
        let start = world.recorder.start();
        let r = call(world, || format!("{name}: requeue {id}"), None, broker.requeue(&id, &token))
            .await;
        world.recorder.finish(name, Act::Requeue, &id, &token, start, res(&r));
    }
}

/// Claims and acks everything claimable, moving the clock and reaping in between, until every
/// task is terminal or nothing moves for many rounds.
pub(crate) async fn drain(broker: &dyn Broker, world: &World, rounds: usize) -> Result<(), Error> {
    for _ in 0..rounds {
        let claim_start = world.recorder.start();
        let claimed = broker.try_dequeue_many(&HISTORY_QUEUES, 100).await?;
        for t in &claimed {
            world.recorder.finish("drain", Act::Claim, &t.id, &t.lease_token, claim_start, Res::Ok);
            let start = world.recorder.start();
            let what = || format!("drain: ack {}", t.id);
            let r = call(world, what, None, broker.ack(&t.id, &t.lease_token, None)).await;
            world.recorder.finish("drain", Act::Ack, &t.id, &t.lease_token, start, res(&r));
        }
        if claimed.is_empty() {
            let all = broker.list(&taskgate::Filter::default()).await?;
            if all.iter().all(|t| t.status.is_terminal()) {
                return Ok(());
            }
            world.clock.advance(Duration::from_secs(61));
            broker.reap_expired().await?;
        }
    }
    Ok(())
}
