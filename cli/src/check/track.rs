//! Remembering every storage a case was handed until the case removed it, so that Ctrl-C can
//! remove what the interrupted case left (its tables, its file).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use brokertest::{Factory, ServerClock, Storage};
use taskgate::{BoxError, Broker, Timestamp};

type Live = Arc<Mutex<BTreeMap<u64, Arc<dyn Storage>>>>;

/// A factory that hands out the inner factory's storages and remembers each one until its
/// `cleanup` ran.
pub(crate) struct Tracker {
    inner: Arc<dyn Factory>,
    live: Live,
    next: AtomicU64,
}

impl Tracker {
    /// Tracks the storages of `inner`.
    pub(crate) fn new(inner: Arc<dyn Factory>) -> Arc<Tracker> {
        Arc::new(Tracker { inner, live: Live::default(), next: AtomicU64::new(0) })
    }

    /// How many storages were handed out and not cleaned up yet.
    pub(crate) fn unfinished(&self) -> usize {
        lock(&self.live).len()
    }

    /// Removes every storage not cleaned up yet (each `cleanup` is idempotent); returns the
    /// first failure, after trying every storage.
    pub(crate) async fn cleanup_all(&self) -> Result<(), BoxError> {
        let storages: Vec<(u64, Arc<dyn Storage>)> =
            lock(&self.live).iter().map(|(id, s)| (*id, s.clone())).collect();
        let mut first_error = None;
        for (id, storage) in storages {
            match storage.cleanup().await {
                Ok(()) => {
                    lock(&self.live).remove(&id);
                }
                Err(e) => {
                    first_error.get_or_insert(e);
                }
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

fn lock(live: &Live) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<dyn Storage>>> {
    live.lock().unwrap_or_else(|p| p.into_inner())
}

#[async_trait]
impl Factory for Tracker {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        let storage: Arc<dyn Storage> = Arc::from(self.inner.storage().await?);
        let id = self.next.fetch_add(1, Ordering::SeqCst);
        lock(&self.live).insert(id, storage.clone());
        Ok(Box::new(Tracked { id, inner: storage, live: self.live.clone() }))
    }
}

/// One storage, forwarded whole; forgotten once its cleanup succeeded.
struct Tracked {
    id: u64,
    inner: Arc<dyn Storage>,
    live: Live,
}

#[async_trait]
impl Storage for Tracked {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        self.inner.handle().await
    }

    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        self.inner.handle_with_prefix(prefix).await
    }

    async fn handle_polling_every(
        &self,
        interval: Duration,
    ) -> Option<Result<Arc<dyn Broker>, BoxError>> {
        self.inner.handle_polling_every(interval).await
    }

    async fn server_clock(
        &self,
        start: Timestamp,
    ) -> Option<Result<Box<dyn ServerClock>, BoxError>> {
        self.inner.server_clock(start).await
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        self.inner.cleanup().await?;
        lock(&self.live).remove(&self.id);
        Ok(())
    }
}
