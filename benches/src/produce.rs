//! Enqueue throughput (one producer, 16 concurrent producers, `enqueue_many` of 100) and the
//! end-to-end pipeline (producers batching `enqueue_many` while claimers `dequeue_many` +
//! `ack_many`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate::{Broker, Task};

use crate::drive::{self, BrokerWorker, Outcome, Spec, Stop};
use crate::fill::TASK_TYPE;
use crate::Result;

/// One enqueue scenario.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Producers {
    /// Concurrent producers.
    pub producers: usize,
    /// Tasks per call: 1 = `enqueue`, more = `enqueue_many`.
    pub batch: usize,
}

impl Producers {
    /// The three scenarios of the matrix: single, 16 concurrent, `enqueue_many` of 100.
    pub const MATRIX: [Producers; 3] = [
        Producers { producers: 1, batch: 1 },
        Producers { producers: 16, batch: 1 },
        Producers { producers: 1, batch: 100 },
    ];

    /// A short label.
    pub fn label(&self) -> String {
        match (self.producers, self.batch) {
            (1, 1) => "enqueue, 1 producer".to_owned(),
            (p, 1) => format!("enqueue, {p} concurrent producers"),
            (1, b) => format!("enqueue_many of {b}, 1 producer"),
            (p, b) => format!("enqueue_many of {b}, {p} producers"),
        }
    }
}

/// Enqueues on `queue` with `scenario` until `calls_each` calls per producer are done or
/// `limit` passes; returns tasks stored and the time taken.
pub async fn enqueue(
    broker: &Arc<dyn Broker>,
    queue: &str,
    scenario: Producers,
    calls_each: u64,
    limit: Duration,
) -> Result<Outcome> {
    let start = Instant::now();
    let deadline = start + limit;
    let mut handles = Vec::new();
    for _ in 0..scenario.producers {
        let (broker, queue) = (broker.clone(), queue.to_owned());
        handles.push(tokio::spawn(async move {
            producer(&*broker, &queue, scenario.batch, calls_each, deadline).await
        }));
    }
    let mut outcome = Outcome::default();
    for handle in handles {
        let (jobs, calls) = handle.await??;
        outcome.jobs += jobs;
        outcome.claims += calls;
    }
    outcome.elapsed = start.elapsed();
    Ok(outcome)
}

async fn producer(
    broker: &dyn Broker,
    queue: &str,
    batch: usize,
    calls: u64,
    deadline: Instant,
) -> Result<(u64, u64)> {
    let (mut jobs, mut done) = (0u64, 0u64);
    while done < calls && Instant::now() < deadline {
        if batch == 1 {
            broker.enqueue(&Task::new(TASK_TYPE, queue)).await?;
        } else {
            let tasks: Vec<Task> = (0..batch).map(|_| Task::new(TASK_TYPE, queue)).collect();
            broker.enqueue_many(&tasks).await?;
        }
        jobs += u64::try_from(batch).unwrap_or(u64::MAX);
        done += 1;
        // Memory enqueues never await: yield so claimers and other producers run too.
        tokio::task::yield_now().await;
    }
    Ok((jobs, done))
}

/// The end-to-end pipeline for `limit`: `producers` loop `enqueue_many(batch)` on one queue
/// while `claimers` loop `dequeue_many(batch)` + `ack_many`. Returns the completed jobs.
pub async fn pipeline(
    broker: &Arc<dyn Broker>,
    producers: usize,
    claimers: usize,
    batch: usize,
    limit: Duration,
) -> Result<Outcome> {
    let spec = Spec { queues: 1, claimers, batch };
    let queue = Spec::queue(0);
    let scenario = Producers { producers, batch };
    let feeder = {
        let broker = broker.clone();
        tokio::spawn(async move { enqueue(&broker, &queue, scenario, u64::MAX, limit).await })
    };
    let b = broker.clone();
    let done = drive::run(spec, &[u64::MAX / 2], Stop::Deadline(limit), |_| {
        Ok(BrokerWorker::new(b.clone()))
    })
    .await?;
    feeder.await??;
    Ok(Outcome { elapsed: limit, ..done })
}
