//! The quota gate in the claim loop (contract §9.6): exhaustion holds tasks pending until the
//! window turns; a failing quota storage admits nothing (fail closed) and recovers.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use brokertest::{CaseResult, Factory};
use taskgate::{Broker, QuotaConfig, QuotaGate, QuotaProvider, Reservation, Status};
use taskgate_worker::{Config, JobError, QueueConfig, Runtime};

use super::count;
use crate::jobs::{Calls, Work};
use crate::{eventually, World};

fn quota_queue(limit: u32, period: Duration) -> Config {
    Config::new().queue("work", QueueConfig::workers(5).quota(limit, period))
}

/// Limit 3 per 2 s, 5 tasks (fake clock): 3 run and the exhausted flag shows; after the
/// window turns the other 2 run.
pub async fn w32_quota_exhaustion(factory: &dyn Factory) -> CaseResult {
    let world = World::manual(factory).await?;
    let config = quota_queue(3, Duration::from_secs(2));
    let rt = world
        .start(|b| {
            b.config(config).register(|job: Work, _ctx| async move { Ok::<_, JobError>(job.n) })
        })
        .await?;
    let client = rt.client();
    let mut group = client.group();
    for n in 0..5 {
        group.add(Work { n }, Default::default());
    }
    group.submit().await?;
    eventually("3 completed and the quota exhausted", || async {
        let done = count(&client, "work", Status::Completed).await?;
        Ok(done == 3 && client.stats("work").await?.quota_exhausted)
    })
    .await?;
    assert_eq!(count(&client, "work", Status::Completed).await?, 3);
    assert_eq!(count(&client, "work", Status::Pending).await?, 2, "waiting tasks stay pending");
    world.advance(Duration::from_secs(2));
    eventually("5 completed", || async {
        Ok(count(&client, "work", Status::Completed).await? == 5)
    })
    .await?;
    let t = client.list(&Default::default()).await?;
    assert!(t.iter().all(|t| t.attempts == 0 && t.throttled == 0), "no counter changed");
    eventually("exhausted flag cleared", || async {
        Ok(!client.stats("work").await?.quota_exhausted)
    })
    .await?;
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}

/// A provider whose gates fail while `failing` is set.
struct FlakyQuota {
    broker: Arc<dyn Broker>,
    failing: Arc<AtomicBool>,
    reserves: Calls,
}

impl QuotaProvider for FlakyQuota {
    fn queue_quota(
        &self,
        queue: &str,
        config: &QuotaConfig,
    ) -> taskgate::Result<Arc<dyn QuotaGate>> {
        let provider =
            self.broker.quota_provider().ok_or(taskgate::Error::invalid("quota", "none"))?;
        let real = provider.queue_quota(queue, config)?;
        Ok(Arc::new(FlakyGate {
            real,
            failing: self.failing.clone(),
            reserves: self.reserves.clone(),
        }))
    }
}

#[derive(Debug)]
struct FlakyGate {
    real: Arc<dyn QuotaGate>,
    failing: Arc<AtomicBool>,
    reserves: Calls,
}

#[async_trait]
impl QuotaGate for FlakyGate {
    async fn reserve(&self) -> taskgate::Result<Option<Reservation>> {
        self.reserves.hit();
        match self.failing.load(Ordering::SeqCst) {
            true => {
                Err(taskgate::Error::backend("test", std::io::Error::other("quota storage down")))
            }
            false => self.real.reserve().await,
        }
    }

    async fn release(&self, reservation: Reservation) -> taskgate::Result<()> {
        self.real.release(reservation).await
    }
}

/// A failing quota storage admits nothing (stalled flag, zero completions over several
/// reserve attempts); when it answers again the tasks run and the flag clears.
pub async fn w33_quota_fail_closed(factory: &dyn Factory) -> CaseResult {
    let world = World::new(factory).await?;
    let handle = world.handle().await?;
    let failing = Arc::new(AtomicBool::new(true));
    let reserves = Calls::default();
    let provider =
        FlakyQuota { broker: handle.clone(), failing: failing.clone(), reserves: reserves.clone() };
    let rt = Runtime::builder(handle)
        .config(quota_queue(100, Duration::from_secs(1)))
        .quota_provider(Arc::new(provider))
        .register(|job: Work, _ctx| async move { Ok::<_, JobError>(job.n) })
        .start()
        .await?;
    let client = rt.client();
    client.submit(Work { n: 1 }).await?;
    client.submit(Work { n: 2 }).await?;
    eventually("stalled after 3 failed reserves", || async {
        Ok(reserves.get() >= 3 && client.stats("work").await?.quota_stalled)
    })
    .await?;
    assert_eq!(count(&client, "work", Status::Completed).await?, 0, "fail closed");
    assert_eq!(count(&client, "work", Status::Pending).await?, 2);
    failing.store(false, Ordering::SeqCst);
    eventually("2 completed", || async {
        Ok(count(&client, "work", Status::Completed).await? == 2)
    })
    .await?;
    assert!(!client.stats("work").await?.quota_stalled, "recovery clears the flag");
    rt.shutdown(Duration::from_secs(5)).await?;
    world.finish().await
}
