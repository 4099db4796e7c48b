//! The submit paths agree: a raw `Task::new`, a typed `submit` and a raw `submit_raw` get one
//! default retry budget; a transactional submit on a broker without transactions says so.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use taskgate::{Broker, ErrorKind, Task, DEFAULT_MAX_RETRY};
use taskgate_worker::{Error, Job, Runtime, SubmitOptions};

#[derive(Serialize, Deserialize)]
struct Note {
    text: String,
}

impl Job for Note {
    const KIND: &'static str = "note";
    type Output = ();
}

type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

#[tokio::test]
async fn task_new_and_every_submit_share_one_retry_budget() -> TestResult {
    let broker = Arc::new(taskgate_memory::MemoryBroker::new());
    let runtime = Runtime::builder(broker.clone()).start().await?;
    let client = runtime.client();
    let typed = client.submit(Note { text: "a".into() }).await?;
    let raw = client.submit_raw("note", None, SubmitOptions::new()).await?;
    let plain = broker.enqueue(&Task::new("note", "note")).await?;
    let budgets = (client.get(typed.as_str()).await?.max_retry, raw.max_retry, plain.max_retry);
    assert_eq!(budgets, (DEFAULT_MAX_RETRY, DEFAULT_MAX_RETRY, DEFAULT_MAX_RETRY));
    assert_eq!((Note::MAX_RETRY, DEFAULT_MAX_RETRY), (25, 25), "the documented number");
    runtime.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}

#[tokio::test]
async fn submit_in_on_a_broker_without_transactions_is_invalid_input() -> TestResult {
    let runtime = Runtime::builder(Arc::new(taskgate_memory::MemoryBroker::new())).start().await?;
    let (client, mut tx) = (runtime.client(), ());
    match client.submit_in(&mut tx, Note { text: "b".into() }, SubmitOptions::new()).await {
        Err(Error::Broker(e)) => {
            assert_eq!(e.kind(), ErrorKind::InvalidInput);
            let text = e.to_string();
            assert!(text.contains("the memory broker cannot enqueue in a transaction"), "{text}");
        }
        other => panic!("expected InvalidInput, got {other:?}"),
    }
    runtime.shutdown(Duration::from_secs(5)).await?;
    Ok(())
}
