//! The leases of held tasks: the keeper renews every task held longer than a heartbeat period
//! (TTL/3 on the runtime's clock); a held task found cancelled is finished as cancelled, one
//! whose lease was lost is dropped (the reaper owns it).

use std::sync::Arc;
use std::time::Duration;

use taskgate::ErrorKind;

use super::held::cancel_held;
use super::pump::pump;
use crate::error::chain_text;
use crate::execute::Execs;
use crate::finish::lease_gone;
use crate::inner::Inner;
use crate::queue::QueueRt;

/// Renews the leases of tasks held longer than a heartbeat period, every period, until
/// shutdown (a round in progress finishes, so every held task is back before shutdown
/// requeues them).
pub(crate) async fn keeper(inner: Arc<Inner>, q: Arc<QueueRt>, execs: Execs) {
    let period = (q.settings.lease_ttl / 3).max(Duration::from_millis(1));
    let mut ticker = inner.clock.ticker(period);
    loop {
        tokio::select! {
            () = ticker.tick() => {}
            () = inner.stops.shutting_down.cancelled() => return,
        }
        let due = q.ahead.take_due(inner.clock.now_ms(), period);
        if due.is_empty() {
            continue;
        }
        let mut back = Vec::with_capacity(due.len());
        for mut held in due {
            let (id, token) = (&held.task.id, &held.task.lease_token);
            match inner.broker.heartbeat(id, token).await {
                Ok(()) => {
                    held.renewed = inner.clock.now_ms();
                    back.push(held);
                }
                Err(e) if e.is(ErrorKind::Canceled) => cancel_held(&inner, &q, &held.task).await,
                Err(e) if lease_gone(&e) => {
                    q.metrics.lease_lost.increment(1);
                    tracing::warn!(task = %id, "a held task's lease was lost; the reaper owns it");
                }
                Err(e) => {
                    tracing::warn!(task = %id, error = %chain_text(&e),
                        "heartbeat of a held task failed (tolerated)");
                    back.push(held);
                }
            }
        }
        q.ahead.put_back(back);
        pump(&inner, &q, &execs);
    }
}
