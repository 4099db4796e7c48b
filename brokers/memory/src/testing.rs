//! The brokertest factory for the in-memory backend: every case gets a fresh store.

use std::sync::Arc;

use async_trait::async_trait;
use brokertest::{Factory, Storage};
use taskgate::{BoxError, Broker};

use crate::MemoryBroker;

/// Hands each contract case a fresh in-memory store.
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryFactory;

#[async_trait]
impl Factory for MemoryFactory {
    fn name(&self) -> String {
        "memory".to_owned()
    }

    async fn storage(&self) -> Result<Box<dyn Storage>, BoxError> {
        Ok(Box::new(MemoryStorage { store: MemoryBroker::new() }))
    }
}

/// One case's in-memory store; every handle it opens shares it.
#[derive(Debug)]
pub struct MemoryStorage {
    store: MemoryBroker,
}

#[async_trait]
impl Storage for MemoryStorage {
    async fn handle(&self) -> Result<Arc<dyn Broker>, BoxError> {
        Ok(Arc::new(self.store.handle()))
    }
}

/// A test's hook on one handle, run after each of its critical sections with the lock
/// released (see [`MemoryRaceRig`]).
#[cfg(feature = "test-hooks")]
#[derive(Default)]
pub(crate) struct AfterWrite(std::sync::RwLock<Option<brokertest::races::CommitHook>>);

#[cfg(feature = "test-hooks")]
impl std::fmt::Debug for AfterWrite {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AfterWrite")
    }
}

#[cfg(feature = "test-hooks")]
impl AfterWrite {
    /// Runs the hook, if one is installed, with `op`.
    pub(crate) fn run(&self, op: &str) {
        let hook = self.0.read().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
        if let Some(hook) = hook {
            hook(op);
        }
    }

    fn set(&self, hook: Option<brokertest::races::CommitHook>) {
        *self.0.write().unwrap_or_else(std::sync::PoisonError::into_inner) = hook;
    }
}

/// Two handles on one fresh store for [`brokertest::races`]. Memory has no commit to hold: A's
/// hook runs at the end of each of A's critical sections, after it is applied and the lock is
/// released (every write of a call is visible to B then). So it serves the races that
/// observe or fail a call at its commit points ([`brokertest::races::audit_atomic_race`]),
/// not those that hold a commit open while B runs (`tests/races.rs` says which run).
/// Feature `test-hooks`.
#[cfg(feature = "test-hooks")]
#[derive(Clone, Copy, Debug, Default)]
pub struct MemoryRaceRig;

#[cfg(feature = "test-hooks")]
#[async_trait]
impl brokertest::races::RaceRig for MemoryRaceRig {
    async fn open(
        &self,
        options: taskgate::BrokerOptions,
    ) -> Result<Box<dyn brokertest::races::RacePair>, BoxError> {
        let a = MemoryBroker::new();
        let b = a.handle();
        a.init(options.clone()).await?;
        b.init(options).await?;
        Ok(Box::new(MemoryPair { a: Arc::new(a), b: Arc::new(b) }))
    }
}

/// Handles A and B of [`MemoryRaceRig`].
#[cfg(feature = "test-hooks")]
struct MemoryPair {
    a: Arc<MemoryBroker>,
    b: Arc<MemoryBroker>,
}

#[cfg(feature = "test-hooks")]
#[async_trait]
impl brokertest::races::RacePair for MemoryPair {
    fn a(&self) -> Arc<dyn Broker> {
        self.a.clone()
    }

    fn b(&self) -> Arc<dyn Broker> {
        self.b.clone()
    }

    fn set_a_hook(&self, hook: Option<brokertest::races::CommitHook>) {
        self.a.inner.after_write.set(hook);
    }

    async fn b_waits(&self) -> Option<bool> {
        None
    }

    async fn finish(self: Box<Self>) -> Result<(), BoxError> {
        self.a.close().await?;
        self.b.close().await?;
        Ok(())
    }
}
