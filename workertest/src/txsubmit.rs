//! The checks every SQL backend's typed transactional submit test makes
//! (`Client::submit_in`, extensions §E15), written once: the job a client routed to
//! [`QUEUE`] is invisible until the caller commits, stored as the client built it once
//! committed, gone after a rollback, and a value that is not the backend's transaction is
//! refused by name.

use taskgate::{BoxError, Broker, ErrorKind, Status, DEFAULT_MAX_RETRY};
use taskgate_worker::{Config, Job};

use crate::jobs::Work;

/// The queue [`config`] routes [`Work`] to.
pub const QUEUE: &str = "outbox";

/// A runtime configuration routing [`Work`] to [`QUEUE`].
pub fn config() -> Config {
    Config::new().route(Work::KIND, QUEUE)
}

/// `id` is not visible to `broker` (`NotFound`); `when` names the moment for the message.
pub async fn assert_invisible(broker: &dyn Broker, id: &str, when: &str) {
    let kind = broker.get(id).await.err().map(|e| e.kind());
    assert_eq!(kind, Some(ErrorKind::NotFound), "job {id} is visible {when}");
}

/// `id`, submitted as `Work { n: 1 }` with default options and committed, is stored as the
/// client built it: kind, routed queue, pending, the default retry budget, the JSON payload.
pub async fn assert_committed(broker: &dyn Broker, id: &str) -> Result<(), BoxError> {
    let task = broker.get(id).await?;
    let got = (task.task_type.as_str(), task.queue.as_str(), task.status, task.max_retry);
    assert_eq!(got, (Work::KIND, QUEUE, Status::Pending, DEFAULT_MAX_RETRY));
    assert_eq!(task.payload.as_deref(), Some(br#"{"n":1}"#.as_slice()));
    Ok(())
}

/// `refused` failed with a message containing `names` (the type it was given, or why it
/// cannot enqueue there), and `broker` holds the one committed job only.
pub async fn assert_refused<T, E: std::fmt::Display>(
    broker: &dyn Broker,
    refused: Result<T, E>,
    names: &str,
) -> Result<(), BoxError> {
    let text = refused.err().map(|e| e.to_string()).unwrap_or_default();
    assert!(text.contains(names), "expected an error naming {names:?}, got {text:?}");
    assert_eq!(broker.list(&taskgate::Filter::default()).await?.len(), 1, "only the kept job");
    Ok(())
}
