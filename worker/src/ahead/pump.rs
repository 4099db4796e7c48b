//! Workers of a claim-ahead queue: each free slot starts the best held task, and a worker that
//! finishes runs the next held one at once, freeing its slot only when none is left.

use std::sync::Arc;
use std::time::Instant;

use taskgate::Task;
use tokio::sync::OwnedSemaphorePermit;

use crate::execute::Execs;
use crate::inner::Inner;
use crate::queue::QueueRt;

/// Starts held tasks while workers are free (none once shutdown began).
pub(crate) fn pump(inner: &Arc<Inner>, q: &Arc<QueueRt>, execs: &Execs) {
    while let Some((task, slot)) = q.ahead.start_one(inner.stops.shutting_down.is_cancelled()) {
        let run = worker(inner.clone(), q.clone(), execs.clone(), task, slot);
        execs.spawn(inner, run);
    }
}

/// One worker: runs `task`, then the next held task while there is one, then frees its slot.
async fn worker(
    inner: Arc<Inner>,
    q: Arc<QueueRt>,
    execs: Execs,
    mut task: Task,
    slot: OwnedSemaphorePermit,
) {
    loop {
        let started = Instant::now();
        execs.execute(inner.clone(), q.clone(), task, None).await;
        let stopping = inner.stops.shutting_down.is_cancelled();
        // A worker that stops sizes the next claim only once its slot is free (below): sized
        // now, while it still counts as busy, the claim would leave its slot to a second claim
        // in flight beside it, and two claims can land in either order.
        let Some(next) = q.ahead.next(started.elapsed(), stopping) else { break };
        task = next;
        q.ahead.poke();
    }
    drop(slot);
    q.ahead.freed();
    // A claim may have landed while this worker still held its slot.
    pump(&inner, &q, &execs);
}
