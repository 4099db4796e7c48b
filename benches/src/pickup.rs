//! Pickup latency: an idle claimer blocked in `dequeue`, a producer enqueues one task, and
//! the time from the start of the enqueue to the claimer holding the task is one sample.
//! With the claimer on a second handle the wake-up must cross handles as it would cross
//! processes (PostgreSQL: LISTEN/NOTIFY; SQLite, MySQL: polling); on the same handle it is
//! the in-process wake-up.

use std::sync::Arc;
use std::time::{Duration, Instant};

use taskgate::{Broker, Task};
use tokio::sync::mpsc;

use crate::fill::TASK_TYPE;
use crate::Result;

/// The queue pickup samples use.
pub const QUEUE: &str = "pickup";
/// Longest wait for one pickup before the sample fails.
pub const SAMPLE_TIMEOUT: Duration = Duration::from_secs(5);

/// Takes `samples` pickups: the claimer waits `idle` before each enqueue, so it is blocked
/// (not polling a hot queue) when the task arrives.
pub async fn pickups(
    producer: Arc<dyn Broker>,
    claimer: Arc<dyn Broker>,
    samples: usize,
    idle: Duration,
) -> Result<Vec<Duration>> {
    let (tx, mut rx) = mpsc::channel::<Instant>(1);
    let claiming = tokio::spawn(claim_loop(claimer, samples, tx));
    let mut out = Vec::with_capacity(samples);
    for _ in 0..samples {
        tokio::time::sleep(idle).await;
        let start = Instant::now();
        producer.enqueue(&Task::new(TASK_TYPE, QUEUE)).await?;
        let got = tokio::time::timeout(SAMPLE_TIMEOUT, rx.recv()).await;
        match got {
            Ok(Some(at)) => out.push(at.saturating_duration_since(start)),
            Ok(None) => break,
            Err(_) => return Err(format!("no pickup within {SAMPLE_TIMEOUT:?}").into()),
        }
    }
    claiming.await??;
    if out.len() < samples {
        return Err("the claimer stopped early".into());
    }
    Ok(out)
}

async fn claim_loop(
    broker: Arc<dyn Broker>,
    samples: usize,
    tx: mpsc::Sender<Instant>,
) -> Result<()> {
    for _ in 0..samples {
        let task = broker.dequeue(&[QUEUE]).await?;
        let at = Instant::now();
        broker.ack(&task.id, &task.lease_token, None).await?;
        if tx.send(at).await.is_err() {
            break;
        }
    }
    Ok(())
}
