//! The state-change observer (contract §3.5).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use taskgate::{Status, Task};

use crate::{task, CaseResult, Factory, Harness, SAFETY_TIMEOUT};

/// How often the case looks at what the collector has seen (contract §10.1 (c)).
const POLL: Duration = Duration::from_millis(10);

/// Given a notify collector that records every snapshot and then panics, when `nt` (llm, q) is
/// enqueued with a blocked child `nt-child` (qc), claimed and acked with `"done"`, then every
/// call succeeds and within 5 s (real) the collector holds `nt` as pending (type llm, queue q),
/// running (with a token) and completed (result `"done"`, finished_at set), and `nt-child` as
/// pending — published by the same ack as `nt`'s completion, so a panic on one snapshot lost
/// none that followed it; afterwards enqueuing `nt2` still works and it is pending.
pub async fn c17_notify(factory: &dyn Factory) -> CaseResult {
    let seen: Arc<Mutex<Vec<Task>>> = Arc::default();
    let sink = seen.clone();
    let h = Harness::with_options(factory, move |o| {
        o.notify = Some(Arc::new(move |t: &Task| {
            sink.lock().unwrap_or_else(|p| p.into_inner()).push(t.clone());
            panic!("the c17 collector panics on every call");
        }));
    })
    .await?;
    h.enqueue(task("nt", "llm", "q")).await;
    h.enqueue(task("nt-child", "llm", "qc").with_depends_on(["nt"])).await;
    let claimed = h.dequeue(&["q"]).await;
    assert_eq!(claimed.id, "nt", "claim from q returned the wrong task");
    h.broker.ack("nt", &claimed.lease_token, Some(br#""done""#.to_vec())).await?;
    let wanted: [Wanted; 4] = [
        ("nt pending", is_pending),
        ("nt running", is_running),
        ("nt completed", is_completed),
        ("nt-child woken", |t| t.id == "nt-child" && t.status == Status::Pending),
    ];
    wait_for_all(&seen, &wanted).await;
    let nt2 = h.enqueue(task("nt2", "llm", "q")).await;
    assert_eq!(nt2.status, Status::Pending, "nt2 after the panicking notifications");
    assert_eq!(h.get("nt2").await.status, Status::Pending, "nt2 read back");
    h.finish().await
}

/// A snapshot the collector must see: its name and how to recognise it.
type Wanted = (&'static str, fn(&Task) -> bool);

fn is_pending(t: &Task) -> bool {
    t.id == "nt" && t.status == Status::Pending && t.task_type == "llm" && t.queue == "q"
}

fn is_running(t: &Task) -> bool {
    t.id == "nt" && t.status == Status::Running && !t.lease_token.is_empty()
}

fn is_completed(t: &Task) -> bool {
    t.id == "nt"
        && t.status == Status::Completed
        && t.result.as_deref() == Some(br#""done""#.as_slice())
        && t.finished_at.is_some()
}

/// Polls the collector every 10 ms (real time) until every predicate matched a snapshot, or
/// fails after 5 s naming what is missing.
async fn wait_for_all(seen: &Mutex<Vec<Task>>, wanted: &[Wanted]) {
    let started = Instant::now();
    loop {
        let missing: Vec<&str> = {
            let snapshots = seen.lock().unwrap_or_else(|p| p.into_inner());
            wanted.iter().filter(|(_, f)| !snapshots.iter().any(f)).map(|(n, _)| *n).collect()
        };
        if missing.is_empty() {
            return;
        }
        if started.elapsed() >= SAFETY_TIMEOUT {
            let got: Vec<String> = seen
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .map(|t| format!("{}:{}", t.id, t.status))
                .collect();
            panic!("within {SAFETY_TIMEOUT:?} no notify snapshot {missing:?}; got {got:?}");
        }
        tokio::time::sleep(POLL).await;
    }
}
