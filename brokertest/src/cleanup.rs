//! Storage that is removed whatever a case's outcome: [`Tracked`] wraps a factory, remembers
//! every storage it handed out, and [`Tracked::sweep`] removes the ones the case did not clean
//! up itself (it panicked, failed an assertion, returned early with an error, timed out before
//! [`Harness::finish`](crate::Harness::finish), or was stopped by Ctrl-C).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use taskgate::{BoxError, Broker, Timestamp};

use crate::{within, Factory, ServerClock, Storage, WAIT_LIMIT};

/// A factory that remembers every storage it handed out until that storage was removed.
/// Every case [`run_all`](crate::run_all) and the generated tests run goes through one, swept
/// when the case ends; `taskgate check` wraps its whole run in another, swept on Ctrl-C.
pub struct Tracked {
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
    /// Tracks the storages of `inner`.
    pub fn new(inner: Arc<dyn Factory>) -> Arc<Tracked> {
        Arc::new(Tracked { inner, made: Mutex::new(Vec::new()) })
    }

    /// How many storages were handed out and not removed yet.
    pub fn unfinished(&self) -> usize {
        self.lock().iter().filter(|s| !s.cleaned.load(Ordering::SeqCst)).count()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Shared>>> {
        self.made.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Removes every storage not removed yet, each within [`WAIT_LIMIT`]; returns how many it
    /// removed, or the first error after trying every one. A storage whose removal failed is
    /// kept for the next sweep.
    pub async fn sweep(&self) -> Result<usize, BoxError> {
        let made = std::mem::take(&mut *self.lock());
        let mut swept = 0;
        let mut first_error = None;
        for shared in made {
            if shared.cleaned.swap(true, Ordering::SeqCst) {
                continue;
            }
            let done =
                within(WAIT_LIMIT, "removing a case's leftover storage", shared.storage.cleanup());
            match done.await {
                Ok(()) => swept += 1,
                Err(e) => {
                    first_error.get_or_insert(e);
                    shared.cleaned.store(false, Ordering::SeqCst);
                    self.lock().push(shared);
                }
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
        let mut made = self.lock();
        made.retain(|s| !s.cleaned.load(Ordering::SeqCst));
        made.push(shared.clone());
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
