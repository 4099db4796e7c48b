//! The claim+ack workload: N claimers spread over Q queues, each looping "claim up to
//! `batch`, complete what it got", until its queue's backlog is drained or a deadline passes.
//! The same driver runs the broker ([`BrokerWorker`]) and the raw-SQL ceilings
//! ([`crate::raw`]), so both do exactly the same work.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use taskgate::{AckItem, Broker};
use tokio::sync::watch;

use crate::backend::Bed;
use crate::Result;

/// One cell of the claim matrix.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Spec {
    /// Queues the backlog and the claimers are spread over (1 or 8).
    pub queues: usize,
    /// Concurrent claimers.
    pub claimers: usize,
    /// Most tasks per claim (`dequeue_many(…, batch)`) and per `ack_many`.
    pub batch: usize,
}

impl Spec {
    /// The queues actually used: claimer `i` serves queue `i % n`, so with fewer claimers
    /// than queues only as many queues as claimers carry work.
    pub fn lanes(&self) -> usize {
        self.queues.min(self.claimers).max(1)
    }

    /// The name of lane `i`'s queue.
    pub fn queue(i: usize) -> String {
        format!("q{i}")
    }

    /// How many claimers serve lane `lane`.
    pub fn claimers_on(&self, lane: usize) -> usize {
        (0..self.claimers).filter(|c| c % self.lanes() == lane).count()
    }

    /// A short label: `q1 c16 b10`.
    pub fn label(&self) -> String {
        format!("q{} c{} b{}", self.queues, self.claimers, self.batch)
    }
}

/// A claimed task as the driver sees it.
#[derive(Clone, Debug)]
pub struct Claimed {
    /// The task's ID.
    pub id: String,
    /// Its lease token (empty for raw claims, which complete by ID).
    pub token: String,
}

/// What a claimer does: claim up to `max` tasks of a queue, then complete them.
#[async_trait]
pub trait Worker: Send {
    /// Claims up to `max` tasks. May wait for work (the broker does); an empty result means
    /// nothing was claimable right now.
    async fn claim(&mut self, queue: &str, max: usize) -> Result<Vec<Claimed>>;
    /// Completes the claimed tasks (ack).
    async fn complete(&mut self, claimed: Vec<Claimed>) -> Result<()>;
    /// True when `claim` may wait for work, so the driver must race it against the stop
    /// signals (dropping it: the broker's claims are cancel-safe). Raw claims never wait and
    /// are never dropped mid-transaction.
    fn may_wait(&self) -> bool {
        false
    }
}

/// The broker as a [`Worker`]: `dequeue_many` then `ack_many`.
pub struct BrokerWorker {
    broker: Arc<dyn Broker>,
}

impl BrokerWorker {
    /// A worker on `broker`.
    pub fn new(broker: Arc<dyn Broker>) -> Self {
        BrokerWorker { broker }
    }
}

#[async_trait]
impl Worker for BrokerWorker {
    async fn claim(&mut self, queue: &str, max: usize) -> Result<Vec<Claimed>> {
        let tasks = self.broker.dequeue_many(&[queue], max).await?;
        Ok(tasks.into_iter().map(|t| Claimed { id: t.id, token: t.lease_token }).collect())
    }

    async fn complete(&mut self, claimed: Vec<Claimed>) -> Result<()> {
        let items: Vec<AckItem> = claimed
            .into_iter()
            .map(|c| AckItem { id: c.id, token: c.token, result: None })
            .collect();
        let outcomes = self.broker.ack_many(&items).await?;
        for (item, outcome) in items.iter().zip(outcomes) {
            outcome.map_err(|e| format!("ack of {} failed: {e}", item.id))?;
        }
        Ok(())
    }

    fn may_wait(&self) -> bool {
        true
    }
}

/// When a run stops.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// When every lane has completed its backlog (`per_lane[i]` tasks), or at the deadline
    /// (a safety net).
    Drained(Duration),
    /// At the deadline, or earlier if a lane's backlog runs out.
    Deadline(Duration),
}

impl Stop {
    fn limit(self) -> Duration {
        match self {
            Stop::Drained(d) | Stop::Deadline(d) => d,
        }
    }
}

/// What one run did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    /// Tasks claimed and completed.
    pub jobs: u64,
    /// From the start to the last completion (or to the deadline if nothing completed).
    pub elapsed: Duration,
    /// Claims that returned work.
    pub claims: u64,
    /// Completion calls.
    pub completions: u64,
    /// True when a lane ran out of backlog before the deadline.
    pub exhausted: bool,
}

impl Outcome {
    /// Jobs per second.
    pub fn rate(&self) -> f64 {
        let secs = self.elapsed.as_secs_f64();
        if secs > 0.0 {
            self.jobs as f64 / secs
        } else {
            0.0
        }
    }
}

/// One queue's share of the run: tasks left and the "drained" signal.
struct Lane {
    left: AtomicI64,
    drained: watch::Sender<bool>,
}

/// A claimer's own tally.
#[derive(Default)]
struct Tally {
    jobs: u64,
    claims: u64,
    completions: u64,
    last: Option<Instant>,
}

/// Runs `spec` with the workers `make` builds (one per claimer), lane `i` holding `per_lane[i]`
/// tasks.
pub async fn run<W, F>(spec: Spec, per_lane: &[u64], stop: Stop, mut make: F) -> Result<Outcome>
where
    W: Worker + 'static,
    F: FnMut(usize) -> Result<W>,
{
    let lanes: Vec<Arc<Lane>> = per_lane
        .iter()
        .map(|n| {
            let left = i64::try_from(*n).unwrap_or(i64::MAX);
            Arc::new(Lane { left: AtomicI64::new(left), drained: watch::channel(left <= 0).0 })
        })
        .collect();
    let start = Instant::now();
    let deadline = tokio::time::Instant::from_std(start + stop.limit());
    let mut handles = Vec::with_capacity(spec.claimers);
    for c in 0..spec.claimers {
        let lane_no = c % spec.lanes();
        let lane = lanes.get(lane_no).cloned().ok_or("fewer backlogs than lanes")?;
        let worker = make(c)?;
        let queue = Spec::queue(lane_no);
        handles.push(tokio::spawn(claimer(worker, lane, queue, spec.batch, deadline)));
    }
    let mut outcome = Outcome::default();
    let mut last = None;
    for handle in handles {
        let tally = handle.await??;
        outcome.jobs += tally.jobs;
        outcome.claims += tally.claims;
        outcome.completions += tally.completions;
        last = last.max(tally.last);
    }
    outcome.exhausted = matches!(stop, Stop::Deadline(_))
        && lanes.iter().any(|l| l.left.load(Ordering::SeqCst) <= 0);
    outcome.elapsed = last.map_or(stop.limit(), |t| t.duration_since(start));
    Ok(outcome)
}

async fn claimer<W: Worker>(
    mut worker: W,
    lane: Arc<Lane>,
    queue: String,
    batch: usize,
    deadline: tokio::time::Instant,
) -> Result<Tally> {
    let mut tally = Tally::default();
    let mut drained = lane.drained.subscribe();
    while lane.left.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
        let claimed = if worker.may_wait() {
            tokio::select! {
                got = worker.claim(&queue, batch) => got?,
                _ = drained.wait_for(|d| *d) => break,
                _ = tokio::time::sleep_until(deadline) => break,
            }
        } else {
            worker.claim(&queue, batch).await?
        };
        if claimed.is_empty() {
            tokio::time::sleep(Duration::from_micros(200)).await;
            continue;
        }
        let n = i64::try_from(claimed.len()).unwrap_or(i64::MAX);
        worker.complete(claimed).await?;
        tally.claims += 1;
        tally.completions += 1;
        tally.jobs += n.unsigned_abs();
        tally.last = Some(Instant::now());
        if lane.left.fetch_sub(n, Ordering::SeqCst) <= n {
            lane.drained.send_replace(true);
        }
        // The memory broker's calls complete without ever awaiting: without a yield, a
        // claimer that always finds work would never let the other claimers run.
        tokio::task::yield_now().await;
    }
    Ok(tally)
}

/// Splits `total` tasks evenly over the spec's lanes (the first lanes take the remainder).
pub fn split(spec: Spec, total: u64) -> Vec<u64> {
    let lanes = u64::try_from(spec.lanes()).unwrap_or(1);
    (0..lanes).map(|i| total / lanes + u64::from(i < total % lanes)).collect()
}

/// Fills each lane's queue of `bed` with its share of the backlog.
pub async fn fill_lanes(bed: &Bed, per_lane: &[u64]) -> Result<()> {
    for (i, n) in per_lane.iter().enumerate() {
        crate::fill::backlog(bed, &Spec::queue(i), *n).await?;
    }
    Ok(())
}

/// Claim+ack on the broker of `bed`, lane `i` holding `per_lane[i]` tasks (already filled).
/// With several handles ([`Bed::handles`]), claimer `c` claims through handle `c % handles`.
pub async fn broker_run(bed: &Bed, spec: Spec, per_lane: &[u64], stop: Stop) -> Result<Outcome> {
    let handles = bed.handles();
    run(spec, per_lane, stop, |c| Ok(BrokerWorker::new(handles[c % handles.len()].clone()))).await
}
