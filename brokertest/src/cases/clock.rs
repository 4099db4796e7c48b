//! The broker's clock as callers see it: `now()` reads the clock every stored time is judged
//! by, a retry asked for "after a delay" is timed on that clock inside the fail itself, and
//! without an injected clock that clock is the storage's (the database server's), never a
//! handle's own local clock (extensions §E1).

use std::sync::{Arc, Mutex};
use std::time::{Duration, UNIX_EPOCH};

use taskgate::{
    BoxError, Broker, BrokerOptions, Clock, ErrorKind, FailKind, Failure, ManualClock, Status,
    Step, Timestamp,
};

use crate::{task, within, CaseResult, Factory, Harness, ServerClock, Storage, WAIT_LIMIT};

/// `now()` is the broker's clock: with the suite's manual clock at 2026-01-01T00:00:00Z it
/// returns exactly that, moves with every advance (to the millisecond), agrees with the
/// `created_at` it stamps and with a second handle on the same storage; before `init` it is
/// `NotInitialized`, after `close` `Closed`.
pub async fn c33_broker_now(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    assert_eq!(h.broker.now().await?, h.now(), "now() before any advance");
    assert_eq!(h.now().to_string(), "2026-01-01T00:00:00.000Z", "the suite's epoch");
    h.advance(Duration::from_millis(1_500));
    let now = h.broker.now().await?;
    assert_eq!(now, h.now(), "now() after advancing 1.5 s");
    assert_eq!(now.to_string(), "2026-01-01T00:00:01.500Z");
    let stored = h.enqueue(task("n1", "job", "qn")).await;
    assert_eq!(stored.created_at, now, "created_at is the broker's now");
    assert_eq!(stored.run_at, now, "a zero run_at is the broker's now");
    h.advance(Duration::from_secs(3_600));
    let second = h.second_handle().await?;
    assert_eq!(second.now().await?, h.now(), "a second handle reads the same clock");
    assert_eq!(h.broker.now().await?, h.now(), "now() after advancing an hour");

    let fresh = h.raw_handle().await?;
    match fresh.now().await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::NotInitialized, "now() before init: {e}"),
        Ok(t) => panic!("now() before init returned {t}"),
    }
    fresh.init(h.options()).await?;
    assert_eq!(fresh.now().await?, h.now(), "now() after init");
    fresh.close().await?;
    match fresh.now().await {
        Err(e) => assert_eq!(e.kind(), ErrorKind::Closed, "now() after close: {e}"),
        Ok(t) => panic!("now() after close returned {t}"),
    }
    h.finish().await
}

/// A retry asked for "after a delay" is timed on the broker's clock: with the clock at T, a
/// business failure retried after 5 s is `retrying` with `run_at` = T + 5 s, not claimable at
/// T + 4.999 s, claimable at T + 5 s; a throttled one after 2 s likewise (and counts
/// `throttled`, not `attempts`). A delay of zero retries at once.
pub async fn c34_retry_after(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    h.enqueue(task("ra", "job", "qra").with_max_retry(1)).await;
    let claimed = h.dequeue(&["qra"]).await;
    h.advance(Duration::from_secs(10));
    let failed_at = h.now();
    let failure = Failure::business_after("try later", Duration::from_secs(5));
    h.broker.fail("ra", &claimed.lease_token, failure).await?;
    let got = h.get("ra").await;
    assert_eq!(got.status, Status::Retrying, "business failure with a retry left");
    assert_eq!(got.run_at, failed_at.saturating_add(Duration::from_secs(5)), "run_at = T + 5 s");
    assert_eq!((got.attempts, got.last_error.as_str()), (1, "try later"));
    assert!(h.broker.try_dequeue(&["qra"]).await?.is_none(), "claimable at T");
    h.advance(Duration::from_millis(4_999));
    assert!(h.broker.try_dequeue(&["qra"]).await?.is_none(), "claimable at T + 4.999 s");
    h.advance(Duration::from_millis(1));
    let again = h.broker.try_dequeue(&["qra"]).await?.ok_or("not claimable at T + 5 s")?;
    assert_eq!(again.id, "ra");

    let throttled_at = h.now();
    let failure = Failure::throttled_after("429", Duration::from_secs(2));
    assert_eq!(failure.kind, FailKind::Throttled);
    h.broker.fail("ra", &again.lease_token, failure).await?;
    let got = h.get("ra").await;
    assert_eq!(got.status, Status::Retrying, "throttled failure below the cap");
    assert_eq!(
        got.run_at,
        throttled_at.saturating_add(Duration::from_secs(2)),
        "run_at = T' + 2 s"
    );
    assert_eq!((got.attempts, got.throttled), (1, 1), "throttled counts throttled only");
    h.advance(Duration::from_millis(1_999));
    assert!(h.broker.try_dequeue(&["qra"]).await?.is_none(), "claimable at T' + 1.999 s");
    h.advance(Duration::from_millis(1));
    let third = h.broker.try_dequeue(&["qra"]).await?.ok_or("not claimable at T' + 2 s")?;

    let failure = Failure::throttled_after("429 again", Duration::ZERO);
    h.broker.fail("ra", &third.lease_token, failure).await?;
    assert_eq!(h.get("ra").await.run_at, h.now(), "a zero delay retries at the broker's now");
    assert!(h.broker.try_dequeue(&["qra"]).await?.is_some(), "claimable at once");
    h.finish().await
}

/// The storage's time at the start of the skew cases: the contract epoch.
fn epoch() -> Timestamp {
    ManualClock::at_contract_epoch().now_ms()
}

/// How far handle A's local clock is ahead of the storage's clock in the server form.
const A_AHEAD: Duration = Duration::from_secs(3_607);
/// How far handle B's local clock is behind the storage's clock in the server form.
const B_BEHIND: Duration = Duration::from_secs(3_603);

/// Two handles on one storage with **no** injected clock, for the cases that check whose
/// clock judges claims (c37, c38).
///
/// Server form (`capabilities().server_clock`): the storage's clock is the database server's,
/// set by the case through [`Storage::server_clock`]; handle A's local clock
/// ([`BrokerOptions::local_clock`]) runs 1 h 7 s ahead of it and B's 1 h 3 s behind, as if
/// they ran on two machines whose clocks are off. Every time must still be the server's.
///
/// Local form (memory, SQLite): the only clock is the local one; both handles share one
/// manual local clock, which is the storage's clock. Every time must be that clock's, never the
/// system clock's.
pub(crate) struct ClockWorld {
    /// Handle A (local clock ahead in the server form).
    pub(crate) a: Arc<dyn Broker>,
    /// Handle B (local clock behind in the server form).
    pub(crate) b: Arc<dyn Broker>,
    storage: Box<dyn Storage>,
    server: Option<Box<dyn ServerClock>>,
    locals: Vec<ManualClock>,
    offset: Mutex<Duration>,
}

impl ClockWorld {
    /// Fresh storage at the contract epoch and the two handles, initialised.
    pub(crate) async fn open(factory: &dyn Factory) -> Result<ClockWorld, BoxError> {
        let name = factory.name();
        let storage = within(WAIT_LIMIT, format!("{name}: new storage"), factory.storage()).await?;
        match ClockWorld::handles(&*storage).await {
            Ok((server, a, b, locals)) => {
                let world = ClockWorld {
                    a,
                    b,
                    storage,
                    server,
                    locals,
                    offset: Mutex::new(Duration::ZERO),
                };
                for (handle, local) in [(&world.a, world.local(0)), (&world.b, world.local(1))] {
                    let options = BrokerOptions {
                        default_lease_ttl: Duration::from_secs(60),
                        lease_lost_max: 3,
                        throttled_max: 100,
                        clock: None,
                        local_clock: Some(Arc::new(local) as Arc<dyn Clock>),
                        ..BrokerOptions::default()
                    };
                    within(WAIT_LIMIT, format!("{name}: init"), handle.init(options)).await?;
                }
                Ok(world)
            }
            Err(e) => {
                within(WAIT_LIMIT, "the storage's cleanup", storage.cleanup()).await?;
                Err(e)
            }
        }
    }

    /// The server clock (if the backend declares one), handles A and B, their local clocks.
    async fn handles(
        storage: &dyn Storage,
    ) -> Result<
        (Option<Box<dyn ServerClock>>, Arc<dyn Broker>, Arc<dyn Broker>, Vec<ManualClock>),
        BoxError,
    > {
        let first = within(WAIT_LIMIT, "a handle", storage.handle()).await?;
        if !first.capabilities().server_clock {
            let b = within(WAIT_LIMIT, "a second handle", storage.handle()).await?;
            return Ok((None, first, b, vec![ManualClock::at_contract_epoch()]));
        }
        let backend = first.backend();
        within(WAIT_LIMIT, "close of the probing handle", first.close()).await?;
        let Some(server) =
            within(WAIT_LIMIT, "the server clock", storage.server_clock(epoch())).await
        else {
            return Err(format!(
                "{backend} declares a server clock (capabilities().server_clock) but its \
                 Storage offers no server_clock: claims judged by the server's clock cannot be \
                 checked"
            )
            .into());
        };
        let server = server?;
        let a = within(WAIT_LIMIT, "handle A on the server clock", server.handle()).await?;
        let b = within(WAIT_LIMIT, "handle B on the server clock", server.handle()).await?;
        let start = UNIX_EPOCH + taskgate::CONTRACT_EPOCH;
        let locals = vec![ManualClock::new(start + A_AHEAD), ManualClock::new(start - B_BEHIND)];
        Ok((Some(server), a, b, locals))
    }

    /// The local clock of handle `i` (0 = A, 1 = B).
    fn local(&self, i: usize) -> ManualClock {
        self.locals[i.min(self.locals.len() - 1)].clone()
    }

    /// True in the server form.
    pub(crate) fn server_form(&self) -> bool {
        self.server.is_some()
    }

    /// The storage's time: the epoch plus the offset set last.
    pub(crate) fn now(&self) -> Timestamp {
        epoch().saturating_add(*self.offset.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// The epoch plus `offset`.
    pub(crate) fn at(&self, offset: Duration) -> Timestamp {
        epoch().saturating_add(offset)
    }

    /// Moves the storage's clock forward to the epoch plus `offset`; the local clocks move
    /// as much (a skew stays a skew).
    pub(crate) async fn set(&self, offset: Duration) -> Result<(), BoxError> {
        let step = {
            let mut current = self.offset.lock().unwrap_or_else(|p| p.into_inner());
            let step = offset.checked_sub(*current).ok_or("the storage's clock only moves on")?;
            *current = offset;
            step
        };
        if let Some(server) = &self.server {
            let at = epoch().saturating_add(offset);
            within(WAIT_LIMIT, "setting the server clock", server.set(at)).await?;
        }
        for local in &self.locals {
            local.advance(step);
        }
        Ok(())
    }

    /// Closes both handles and removes the storage (and its server clock).
    pub(crate) async fn finish(self) -> Result<(), BoxError> {
        within(WAIT_LIMIT, "close of handle A", self.a.close()).await?;
        within(WAIT_LIMIT, "close of handle B", self.b.close()).await?;
        drop(self.server);
        within(WAIT_LIMIT, "the storage's cleanup", self.storage.cleanup()).await
    }
}

/// Claims, leases and delays are judged by the storage's clock, never a handle's own
/// (extensions §E1). Given two handles with no injected clock, the storage at the epoch S,
/// and (server form) A's local clock 1 h ahead and B's 1 h behind: `now()` on both is S;
/// `live` enqueued with no run_at is created and due at S, `later` is due at S + 300 s; A
/// claims `live` alone at S (started_at S); at S + 30 s A's reaper reaps nothing (the lease
/// runs to S + 60 s) and A does not claim `later`; A's heartbeat at S + 45 s renews the lease
/// to S + 105 s, so B's reaper reaps nothing at S + 61 s and reaps `live` at S + 106 s; B
/// claims `later` at S + 300 s (not at S + 299.999 s); B's fail "retry after 5 s" sets run_at
/// S + 305 s (A cannot claim it at S + 304.999 s, can at S + 305 s); A's saved step with a
/// 2 s delay sets run_at S + 307 s. In the local form (memory, SQLite) both handles share one
/// manual local clock at S, and every time above must be that clock's, not the system
/// clock's.
pub async fn c37_claims_by_server_clock(factory: &dyn Factory) -> CaseResult {
    let w = ClockWorld::open(factory).await?;
    let (a, b) = (w.a.clone(), w.b.clone());
    let s = w.now();
    let ahead = if w.server_form() { "A, whose local clock is 1 h ahead," } else { "A" };
    let behind = if w.server_form() { "B, whose local clock is 1 h behind," } else { "B" };
    assert_eq!(a.now().await?, s, "{ahead} now() must be the storage's clock");
    assert_eq!(b.now().await?, s, "{behind} now() must be the storage's clock");
    let live = a.enqueue(&task("live", "job", "qs")).await?;
    assert_eq!((live.created_at, live.run_at), (s, s), "live: created and due at S");
    let later = task("later", "job", "ql").with_run_at(w.at(Duration::from_secs(300)));
    a.enqueue(&later.with_max_retry(1)).await?;
    let claimed = a.try_dequeue_many(&["qs", "ql"], 10).await?;
    let ids: Vec<&str> = claimed.iter().map(|t| t.id.as_str()).collect();
    assert_eq!(ids, ["live"], "{ahead} claims at S: later is due at S + 300 s");
    assert_eq!(claimed[0].started_at, Some(s), "live: started_at is S");
    let token = claimed[0].lease_token.clone();

    w.set(Duration::from_secs(30)).await?;
    assert_eq!(
        a.reap_expired().await?,
        0,
        "{ahead} reaped at S + 30 s a lease that runs to S + 60 s"
    );
    assert!(a.try_dequeue(&["ql"]).await?.is_none(), "{ahead} claimed later at S + 30 s");
    w.set(Duration::from_secs(45)).await?;
    a.heartbeat("live", &token).await?;
    w.set(Duration::from_secs(61)).await?;
    let reaped = b.reap_expired().await?;
    assert_eq!(reaped, 0, "{behind} reaped at S + 61 s a lease renewed at S + 45 s to S + 105 s");
    w.set(Duration::from_secs(106)).await?;
    let reaped = b.reap_expired().await?;
    assert_eq!(reaped, 1, "{behind} must reap at S + 106 s the lease that ran to S + 105 s");
    let got = b.get("live").await?;
    assert_eq!((got.status, got.lease_lost), (Status::Pending, 1), "live after the reap");

    w.set(Duration::from_millis(299_999)).await?;
    assert!(b.try_dequeue(&["ql"]).await?.is_none(), "later claimed at S + 299.999 s");
    w.set(Duration::from_secs(300)).await?;
    let later = b.try_dequeue(&["ql"]).await?;
    let later = later.ok_or(format!("{behind} could not claim later at S + 300 s, its run_at"))?;
    assert_eq!(later.started_at, Some(w.now()), "later: started_at is S + 300 s");
    let failure = Failure::business_after("again", Duration::from_secs(5));
    b.fail("later", &later.lease_token, failure).await?;
    let got = a.get("later").await?;
    let expected = (Status::Retrying, w.at(Duration::from_secs(305)));
    assert_eq!((got.status, got.run_at), expected, "{behind} retry after 5 s: run_at S + 305 s");
    w.set(Duration::from_millis(304_999)).await?;
    assert!(a.try_dequeue(&["ql"]).await?.is_none(), "{ahead} claimed later before its retry");
    w.set(Duration::from_secs(305)).await?;
    let again = a.try_dequeue(&["ql"]).await?.ok_or("later not claimable at S + 305 s")?;
    let step = Step { delay: Duration::from_secs(2), ..Step::default() };
    a.save_step("later", &again.lease_token, step).await?;
    let got = b.get("later").await?;
    let expected = (Status::Pending, w.at(Duration::from_secs(307)));
    assert_eq!(
        (got.status, got.run_at),
        expected,
        "{ahead} step with a 2 s delay: run_at S + 307 s"
    );
    assert_eq!(b.now().await?, w.now(), "{behind} now() at the end");
    w.finish().await
}
