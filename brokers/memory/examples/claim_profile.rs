//! A deterministic driver for instruction counts of the claim+ack path (report notes,
//! finding 8): enqueues `N` (a multiple of 1000) no-op tasks on one queue (untimed), then claims and acks them in
//! batches on one task the way the benchmark's claimers do (`dequeue_many`, then `ack_many`
//! of `(id, token)` pairs). Run it under callgrind with the drain alone collected:
//!
//! ```text
//! valgrind --tool=callgrind --toggle-collect='*claim_profile::drain*' \
//!     target/release/examples/claim_profile 20000 100
//! ```
//!
//! and divide the instructions by `N`. Arguments: `N` (default 20000) and the batch
//! (default 100; 0 fills and stops).

use std::hint::black_box;

use taskgate::{AckItem, Broker, BrokerOptions, Task};
use taskgate_memory::MemoryBroker;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let n: usize = args.next().map_or(Ok(20_000), |a| a.parse())?;
    let batch: usize = args.next().map_or(Ok(100), |a| a.parse())?;
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    let broker = MemoryBroker::new();
    rt.block_on(async {
        broker.init(BrokerOptions::default()).await?;
        let template = Task::new("noop", "q0");
        for _ in 0..n.div_ceil(1000) {
            broker.enqueue_many(&vec![template.clone(); 1000]).await?;
        }
        Ok::<_, taskgate::Error>(())
    })?;
    if batch == 0 {
        // The fill alone: the baseline for counts of the whole run (e.g. valgrind's heap
        // summary) to subtract.
        return Ok(());
    }
    let done = drain(&rt, &broker, n, batch)?;
    println!("claimed and acked {done} tasks at batch {batch}");
    Ok(())
}

/// Claims and acks `n` tasks of queue `q0` (waiting claims, as the benchmark's); returns how
/// many tasks it completed.
#[inline(never)]
fn drain(
    rt: &tokio::runtime::Runtime,
    broker: &MemoryBroker,
    n: usize,
    batch: usize,
) -> taskgate::Result<usize> {
    rt.block_on(async {
        let mut done = 0;
        while done < n {
            let claimed = broker.dequeue_many(&["q0"], batch).await?;
            // As the benchmark's worker: keep the ID and the token, drop the rest.
            let pairs: Vec<(String, String)> =
                claimed.into_iter().map(|t| (t.id, t.lease_token)).collect();
            let items: Vec<AckItem> =
                pairs.into_iter().map(|(id, token)| AckItem { id, token, result: None }).collect();
            for outcome in broker.ack_many(&items).await? {
                black_box(outcome?);
            }
            done += items.len();
        }
        Ok(done)
    })
}
