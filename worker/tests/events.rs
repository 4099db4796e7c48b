//! The runtime's tracing events, as a person reading the log sees them: a retried failure is
//! `warn`, a final failure `error`, a reaped task and a lost lease `warn`, a handler
//! interrupted by shutdown and requeued `info`; each names its task through the
//! `taskgate.task` span (kind, queue, id). The events are captured by a small layer on
//! `tracing-subscriber`'s `Registry`, installed for the test's thread only.

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use taskgate::{Broker, Clock, ManualClock, Status};
use taskgate_memory::MemoryBroker;
use taskgate_worker::{Config, Job, JobContext, JobError, QueueConfig, Runtime};
use tracing::field::{Field, Visit};
use tracing::{span, Event, Level, Subscriber};
use tracing_subscriber::layer::{Context, Layer, SubscriberExt};
use tracing_subscriber::registry::{LookupSpan, Registry};

type TestResult = std::result::Result<(), Box<dyn std::error::Error + Send + Sync>>;

/// One captured event: its level, message, and its own fields over its spans' fields.
#[derive(Clone, Debug)]
struct Seen {
    level: Level,
    message: String,
    fields: BTreeMap<String, String>,
}

impl Seen {
    fn field(&self, name: &str) -> &str {
        self.fields.get(name).map_or("", String::as_str)
    }
}

/// Field values as text (`%` and `?` values alike).
#[derive(Default)]
struct Fields(BTreeMap<String, String>);

impl Visit for Fields {
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

/// A span's fields, kept in its extensions for the events inside it.
struct SpanFields(BTreeMap<String, String>);

/// The capturing layer.
#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<Seen>>>);

impl Capture {
    fn events(&self) -> Vec<Seen> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The first event with `message`, if one was emitted.
    fn find(&self, message: &str) -> Option<Seen> {
        self.events().into_iter().find(|e| e.message == message)
    }

    /// Waits (real time, 10 s at most) for an event with `message`.
    async fn wait_for(&self, message: &str) -> Seen {
        let found = until(message, || async { self.find(message) }).await;
        found.unwrap_or_else(|| panic!("no event {message:?}; seen: {:#?}", self.events()))
    }
}

impl<S> Layer<S> for Capture
where
    S: Subscriber + for<'a> LookupSpan<'a>,
{
    fn on_new_span(&self, attrs: &span::Attributes<'_>, id: &span::Id, ctx: Context<'_, S>) {
        let mut fields = Fields::default();
        attrs.record(&mut fields);
        if let Some(span) = ctx.span(id) {
            span.extensions_mut().insert(SpanFields(fields.0));
        }
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = BTreeMap::new();
        if let Some(scope) = ctx.event_scope(event) {
            for span in scope.from_root() {
                if let Some(own) = span.extensions().get::<SpanFields>() {
                    fields.extend(own.0.clone());
                }
            }
        }
        let mut own = Fields::default();
        event.record(&mut own);
        let message = own.0.remove("message").unwrap_or_default();
        fields.extend(own.0);
        let seen = Seen { level: *event.metadata().level(), message, fields };
        self.0.lock().unwrap_or_else(|p| p.into_inner()).push(seen);
    }
}

/// Polls `probe` every 10 ms until it returns `Some`, for 10 s at most (real time).
async fn until<T, F, Fut>(what: &str, mut probe: F) -> Option<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let started = Instant::now();
    loop {
        if let Some(found) = probe().await {
            return Some(found);
        }
        if started.elapsed() > Duration::from_secs(10) {
            eprintln!("gave up waiting for {what}");
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// Fails every run; one retry allowed.
#[derive(Serialize, Deserialize)]
struct Flaky;

impl Job for Flaky {
    const KIND: &'static str = "flaky";
    type Output = ();
    const MAX_RETRY: u32 = 1;
}

/// Fails its only run.
#[derive(Serialize, Deserialize)]
struct Doomed;

impl Job for Doomed {
    const KIND: &'static str = "doomed";
    type Output = ();
    const MAX_RETRY: u32 = 0;
}

/// Its first run stalls without heartbeats until the test lets it go.
#[derive(Serialize, Deserialize)]
struct Stall;

impl Job for Stall {
    const KIND: &'static str = "stall";
    type Output = u32;
}

/// Runs until shutdown cancels it.
#[derive(Serialize, Deserialize)]
struct Hang;

impl Job for Hang {
    const KIND: &'static str = "hang";
    type Output = ();
}

#[tokio::test]
async fn failures_reaping_and_lost_leases_are_leveled_events() -> TestResult {
    let capture = Capture::default();
    let _installed = tracing::subscriber::set_default(Registry::default().with(capture.clone()));
    let clock = ManualClock::at_contract_epoch();
    let config = Config::new().queue(
        "stall",
        QueueConfig::workers(2).manual_heartbeat().lease_ttl(Duration::from_millis(800)),
    );
    let (calls, gate) = (Arc::new(AtomicUsize::new(0)), Arc::new(tokio::sync::Notify::new()));
    let (c, g) = (calls.clone(), gate.clone());
    let runtime = Runtime::builder(Arc::new(MemoryBroker::new()))
        .clock(Arc::new(clock.clone()) as Arc<dyn Clock>)
        .config(config)
        .register(|_: Flaky, _| async { Err::<(), _>(JobError::msg("upstream answered 503")) })
        .register(|_: Doomed, _| async { Err::<(), _>(JobError::msg("no such customer")) })
        .register(move |_: Stall, ctx: JobContext| {
            let (call, gate) = (c.fetch_add(1, Ordering::SeqCst) + 1, g.clone());
            async move {
                if call == 1 {
                    gate.notified().await;
                    // The stale run learns its lease is gone; nothing it returns is written.
                    let _ = ctx.renew_lease().await;
                }
                Ok::<_, JobError>(u32::try_from(call).unwrap_or(0))
            }
        })
        .start()
        .await?;
    let client = runtime.client();

    let flaky = client.submit(Flaky).await?;
    let retried = capture.wait_for("failed; retrying").await;
    assert_eq!(retried.level, Level::WARN, "{retried:?}");
    assert_eq!(retried.field("error"), "upstream answered 503", "{retried:?}");
    assert!(!retried.field("retry_in").is_empty(), "when it runs again: {retried:?}");
    assert_eq!((retried.field("kind"), retried.field("id")), ("flaky", flaky.as_str()));

    let doomed = client.submit(Doomed).await?;
    let last = capture.wait_for("failed for good: no retry left").await;
    assert_eq!(last.level, Level::ERROR, "{last:?}");
    assert_eq!(last.field("error"), "no such customer", "{last:?}");
    assert_eq!((last.field("kind"), last.field("id")), ("doomed", doomed.as_str()));

    // A run that stops heart-beating past its 800 ms lease: the reaper takes the task back
    // (warn: its worker looks dead), the task runs again, and the stale run's lease is lost.
    let stall = client.submit(Stall).await?;
    until("the first run", || async { (calls.load(Ordering::SeqCst) == 1).then_some(()) }).await;
    assert_eq!(calls.load(Ordering::SeqCst), 1, "the stalling run started");
    clock.advance(Duration::from_millis(801));
    let reaped = capture.wait_for("reaped tasks whose lease expired; they run again").await;
    assert_eq!((reaped.level, reaped.field("reaped")), (Level::WARN, "1"), "{reaped:?}");
    let done = until("the second run's ack", || async {
        let t = client.get(stall.as_str()).await.ok()?;
        (t.status == Status::Completed).then_some(t)
    })
    .await
    .ok_or("the second run did not complete")?;
    assert_eq!((done.result.as_deref(), done.lease_lost), (Some(&b"2"[..]), 1));
    gate.notify_one();
    let lost = capture.wait_for("lease lost: the reaper owns the task; nothing written").await;
    assert_eq!(lost.level, Level::WARN, "{lost:?}");
    assert_eq!((lost.field("kind"), lost.field("id")), ("stall", stall.as_str()), "{lost:?}");
    let noticed = capture.find("lease lost").ok_or("the renewal's lease-lost event")?;
    assert_eq!((noticed.level, noticed.field("task")), (Level::WARN, stall.as_str()));

    runtime.shutdown(Duration::from_secs(5)).await?;
    assert!(
        capture.events().iter().all(|e| e.level != Level::ERROR || e.field("kind") == "doomed"),
        "only the final failure is an error: {:#?}",
        capture.events()
    );
    Ok(())
}

#[tokio::test]
async fn an_interruption_at_shutdown_is_reported_with_the_requeue() -> TestResult {
    let capture = Capture::default();
    let _installed = tracing::subscriber::set_default(Registry::default().with(capture.clone()));
    let broker = Arc::new(MemoryBroker::new());
    let started = Arc::new(AtomicUsize::new(0));
    let s = started.clone();
    let runtime = Runtime::builder(broker.clone())
        .register(move |_: Hang, ctx: JobContext| {
            s.fetch_add(1, Ordering::SeqCst);
            async move {
                ctx.cancelled().await;
                Err::<(), _>(JobError::msg("stopped mid-way"))
            }
        })
        .start()
        .await?;
    let hang = runtime.client().submit(Hang).await?;
    until("the handler", || async { (started.load(Ordering::SeqCst) == 1).then_some(()) }).await;
    let report = runtime.shutdown(Duration::from_millis(200)).await?;
    assert_eq!(report.requeued, 1, "{report:?}");

    let grace = capture.find("shutdown grace elapsed; cancelling running handlers");
    let grace = grace.ok_or("the grace event")?;
    assert_eq!((grace.level, grace.field("running")), (Level::WARN, "1"), "{grace:?}");
    let requeued = capture.find("interrupted by shutdown; requeued").ok_or("the requeue event")?;
    assert_eq!(requeued.level, Level::INFO, "{requeued:?}");
    assert_eq!((requeued.field("kind"), requeued.field("id")), ("hang", hang.as_str()));
    let down = capture.find("shut down").ok_or("the shutdown report")?;
    assert_eq!(down.level, Level::INFO, "{down:?}");
    assert!(down.field("report").contains("1 interrupted and requeued"), "{down:?}");
    assert_eq!(broker.get(hang.as_str()).await?.status, Status::Pending, "requeued");
    Ok(())
}
