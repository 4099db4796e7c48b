//! In-memory taskgate broker (skeleton; being written).

use std::sync::Arc;

use async_trait::async_trait;
use taskgate::{
    AckItem, Broker, BrokerOptions, Counts, Error, Failure, Filter, PruneRequest, ReplayRequest,
    Result, Step, Task,
};

#[cfg(feature = "testing")]
pub mod testing;

const NAME: &str = "memory";

fn not_yet<T>() -> Result<T> {
    Err(Error::backend(NAME, "not yet"))
}

#[derive(Debug, Default)]
struct Shared;

/// An in-memory broker handle.
#[derive(Debug, Clone, Default)]
pub struct MemoryBroker {
    shared: Arc<Shared>,
}

impl MemoryBroker {
    /// A new, empty, uninitialised store and a handle on it.
    pub fn new() -> Self {
        MemoryBroker::default()
    }

    /// A second handle on the same storage.
    pub fn handle(&self) -> MemoryBroker {
        MemoryBroker { shared: self.shared.clone() }
    }
}

#[async_trait]
impl Broker for MemoryBroker {
    fn backend(&self) -> &'static str {
        NAME
    }
    async fn init(&self, _options: BrokerOptions) -> Result<()> {
        not_yet()
    }
    async fn close(&self) -> Result<()> {
        not_yet()
    }
    async fn enqueue(&self, _task: &Task) -> Result<Task> {
        not_yet()
    }
    async fn enqueue_many(&self, _tasks: &[Task]) -> Result<Vec<Task>> {
        not_yet()
    }
    async fn try_dequeue_many(&self, _queues: &[&str], _max: usize) -> Result<Vec<Task>> {
        not_yet()
    }
    async fn dequeue_many(&self, _queues: &[&str], _max: usize) -> Result<Vec<Task>> {
        not_yet()
    }
    async fn ack(&self, _id: &str, _token: &str, _result: Option<Vec<u8>>) -> Result<()> {
        not_yet()
    }
    async fn ack_many(&self, _items: &[AckItem]) -> Result<Vec<Result<()>>> {
        not_yet()
    }
    async fn fail(&self, _id: &str, _token: &str, _failure: Failure) -> Result<()> {
        not_yet()
    }
    async fn cancel(&self, _id: &str) -> Result<()> {
        not_yet()
    }
    async fn finish_canceled(&self, _id: &str, _token: &str) -> Result<()> {
        not_yet()
    }
    async fn requeue(&self, _id: &str, _token: &str) -> Result<()> {
        not_yet()
    }
    async fn heartbeat(&self, _id: &str, _token: &str) -> Result<()> {
        not_yet()
    }
    async fn save_step(&self, _id: &str, _token: &str, _step: Step) -> Result<()> {
        not_yet()
    }
    async fn get(&self, _id: &str) -> Result<Task> {
        not_yet()
    }
    async fn replay(&self, _request: ReplayRequest) -> Result<Task> {
        not_yet()
    }
    async fn resume(&self, _id: &str) -> Result<Task> {
        not_yet()
    }
    async fn list(&self, _filter: &Filter) -> Result<Vec<Task>> {
        not_yet()
    }
    async fn queue_len(&self, _queue: &str) -> Result<u64> {
        not_yet()
    }
    async fn counts(&self) -> Result<Counts> {
        not_yet()
    }
    async fn reap_expired(&self) -> Result<u64> {
        not_yet()
    }
    async fn pause_queue(&self, _queue: &str) -> Result<()> {
        not_yet()
    }
    async fn resume_queue(&self, _queue: &str) -> Result<()> {
        not_yet()
    }
    async fn paused_queues(&self) -> Result<Vec<String>> {
        not_yet()
    }
    async fn prune(&self, _request: PruneRequest) -> Result<u64> {
        not_yet()
    }
}
