//! Storage that is removed whatever a case's outcome: [`Tracked`] wraps a factory for one
//! case run, remembers every storage it handed out, and [`Tracked::sweep`] removes the ones
//! the case did not clean up itself (it panicked, failed an assertion, returned early with an
//! error, or timed out before [`Harness::finish`](crate::Harness::finish)).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use taskgate::{BoxError, Broker, Timestamp};

use crate::{within, Factory, ServerClock, Storage, WAIT_LIMIT};

/// A factory that remembers the storage it made for one case.
pub(crate) struct Tracked {
    inner: Arc<dyn Factory>,
    made: Mutex<Vec<Arc<Shared>>>,
}

struct Shared {
    storage: Box<dyn Storage>,
    cleaned: AtomicBool,
}

/// What the case holds: the storage, shared with the tracker.
struct Handle(Arc<Shared>);

impl Tracked {
    pub(crate) fn new(inner: Arc<dyn Factory>) -> Arc<Tracked> {
        Arc::new(Tracked { inner, made: Mutex::new(Vec::new()) })
    }

    /// Removes every storage the case did not remove; returns how many, or the first error.
    pub(crate) async fn sweep(&self) -> Result<usize, BoxError> {
        let made = std::mem::take(&mut *self.made.lock().unwrap_or_else(|p| p.into_inner()));
        let mut swept = 0;
        let mut first_error = None;
        for shared in made {
            if shared.cleaned.swap(true, Ordering::SeqCst) {
                continue;
            }
            swept += 1;
            let done =
                within(WAIT_LIMIT, "removing a failed case's storage", shared.storage.cleanup());
            if let Err(e) = done.await {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(swept), Err)
    }
}

#[async_trait]
impl Factory for Tracked {
    fn name(&self) -> String {
        self.inner.name()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        let storage = self.inner.storage().await?;
        let shared = Arc::new(Shared { storage, cleaned: AtomicBool::new(false) });
        self.made.lock().unwrap_or_else(|p| p.into_inner()).push(shared.clone());
        Ok(Box::new(Handle(shared)))
    }
}

#[async_trait]
impl Storage for Handle {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        self.0.storage.handle().await
    }

    async fn handle_with_prefix(&self, prefix: &str) -> Option<taskgate::Result<Arc<dyn Broker>>> {
        self.0.storage.handle_with_prefix(prefix).await
    }

    async fn handle_polling_every(
        &self,
        interval: Duration,
    ) -> Option<Result<Arc<dyn Broker>, BoxError>> {
        self.0.storage.handle_polling_every(interval).await
    }

    async fn server_clock(
        &self,
        start: Timestamp,
    ) -> Option<Result<Box<dyn ServerClock>, BoxError>> {
        self.0.storage.server_clock(start).await
    }

    async fn cleanup(&self) -> Result<(), BoxError> {
        if self.0.cleaned.swap(true, Ordering::SeqCst) {
            return Ok(());
        }
        self.0.storage.cleanup().await
    }
}
