//! Quick start: enqueue two tasks where one depends on the other, work them off, read the
//! results. Run it with `cargo run --example quickstart`.

use taskgate::{Broker, BrokerOptions, Status, Task};
use taskgate_memory::MemoryBroker;

#[tokio::main]
async fn main() -> taskgate::Result<()> {
    // What the library logs goes through `tracing`: print `info` and up (`RUST_LOG` overrides).
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    let broker = MemoryBroker::new();
    broker.init(BrokerOptions::default()).await?;

    // A report that waits for its data fetch to finish.
    let fetch = broker
        .enqueue(&Task::new("fetch", "default").with_payload(br#"{"day":"2026-07-16"}"#.to_vec()))
        .await?;
    let report =
        broker.enqueue(&Task::new("report", "default").with_depends_on([fetch.id.clone()])).await?;
    assert_eq!(report.status, Status::Blocked);

    // A worker: claim under a lease, do the work, ack with a result.
    for _ in 0..2 {
        let task = broker.dequeue(&["default"]).await?;
        println!("running {} ({})", task.task_type, task.id);
        let result = format!(r#"{{"done":"{}"}}"#, task.task_type).into_bytes();
        broker.ack(&task.id, &task.lease_token, Some(result)).await?;
    }

    let report = broker.get(&report.id).await?;
    println!(
        "report is {} with {}",
        report.status,
        String::from_utf8_lossy(report.result.as_deref().unwrap_or_default())
    );
    broker.close().await
}
