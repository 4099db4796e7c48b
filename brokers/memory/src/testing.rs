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
