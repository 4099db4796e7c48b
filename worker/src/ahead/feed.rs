//! The feeders of a claim-ahead queue: feeder 0 waits for work (`dequeue_many`); the others
//! claim without waiting (`try_dequeue_many`) only while the last claim came back full.

use std::sync::Arc;
use std::time::Instant;

use super::pump::pump;
use crate::claim::{dequeue, try_dequeue, Claim};
use crate::execute::Execs;
use crate::inner::Inner;
use crate::queue::QueueRt;

/// One feeder of `q` until shutdown: reserve what the queue needs, claim it, hand it over.
pub(crate) async fn feed_loop(inner: Arc<Inner>, q: Arc<QueueRt>, execs: Execs, n: usize) {
    let stop = inner.stops.shutting_down.clone();
    loop {
        let Some(want) = q.ahead.reserve(&stop, n).await else { return };
        let started = Instant::now();
        let claim = match n {
            0 => dequeue(&inner, &q, want, &stop).await,
            _ => try_dequeue(&inner, &q, want, &stop).await,
        };
        match claim {
            Claim::Tasks(tasks) => {
                q.ahead.land(want, tasks, started.elapsed(), inner.clock.now_ms());
                pump(&inner, &q, &execs);
            }
            Claim::Retry => q.ahead.release(want),
            Claim::Stop => {
                q.ahead.release(want);
                return;
            }
        }
    }
}
