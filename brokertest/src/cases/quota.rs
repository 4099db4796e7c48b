//! The periodic hard quota (contract §9, §10.3): limit 3 per 10 s window on queue q. A backend
//! that declares no quota reports these cases unsupported; one that declares quota but has no
//! provider fails them.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use taskgate::{window_start, BoxError, Broker, QuotaConfig, QuotaGate, Reservation};
use tokio::sync::Barrier;

use super::clock::ClockWorld;
use crate::{CaseResult, Factory, Harness, Need, SAFETY_TIMEOUT};

const LIMIT: u32 = 3;
const PERIOD: Duration = Duration::from_secs(10);

/// A harness on a backend that declares quota (else the case is unsupported) and has a
/// provider (else it fails).
async fn quota_harness(factory: &dyn Factory) -> Result<Harness, BoxError> {
    Harness::new(factory).await?.require(Need::Quota).await
}

/// A gate for queue q with limit 3, period 10 s and `key`; a backend without quota fails.
pub(crate) fn gate(broker: &dyn Broker, key: &str) -> Result<Arc<dyn QuotaGate>, BoxError> {
    let provider = broker.quota_provider().ok_or("backend has no QuotaProvider")?;
    let config = QuotaConfig { limit: LIMIT, period: PERIOD, key: key.into() };
    Ok(provider.queue_quota("q", &config)?)
}

/// Reserve must return a reservation.
pub(crate) async fn reserve(gate: &dyn QuotaGate, what: &str) -> Reservation {
    match tokio::time::timeout(SAFETY_TIMEOUT, gate.reserve()).await {
        Ok(Ok(Some(r))) => r,
        Ok(Ok(None)) => panic!("{what}: reserve found the window exhausted"),
        Ok(Err(e)) => panic!("{what}: reserve failed: {e}"),
        Err(_) => panic!("{what}: reserve did not return within {SAFETY_TIMEOUT:?}"),
    }
}

/// Reserve must report exhaustion: no reservation and no error.
pub(crate) async fn exhausted(gate: &dyn QuotaGate, what: &str) {
    match tokio::time::timeout(SAFETY_TIMEOUT, gate.reserve()).await {
        Ok(Ok(None)) => {}
        Ok(Ok(Some(r))) => panic!("{what}: expected exhausted, reserved window {}", r.window),
        Ok(Err(e)) => panic!("{what}: expected exhausted, reserve failed: {e}"),
        Err(_) => panic!("{what}: reserve did not return within {SAFETY_TIMEOUT:?}"),
    }
}

/// Three reservations in one window, which is the current one on the injected clock.
async fn reserve_three(h: &Harness, gate: &dyn QuotaGate, what: &str) -> Vec<Reservation> {
    let mut got = Vec::new();
    for i in 1..=LIMIT {
        got.push(reserve(gate, &format!("{what}: reservation {i}")).await);
    }
    let window = current_window(h);
    assert!(got.iter().all(|r| r.window == window), "{what}: windows {got:?}, expected {window}");
    got
}

/// `floor(now / 10 s) × 10 s` in unix seconds on the case's clock (the medium's time).
fn current_window(h: &Harness) -> i64 {
    window_start(h.now().as_secs(), 10)
}

/// Given gate k1, when three units are reserved, then all share the current window and a
/// fourth is exhausted; when the first is released, then exactly one more succeeds and the
/// next is exhausted.
pub async fn q1_quota_hard_limit(factory: &dyn Factory) -> CaseResult {
    let h = quota_harness(factory).await?;
    let g = gate(&*h.broker, "k1")?;
    let got = reserve_three(&h, &*g, "k1").await;
    exhausted(&*g, "k1 fourth").await;
    g.release(got[0]).await?;
    let again = reserve(&*g, "k1 after a release").await;
    assert_eq!(again.window, got[0].window, "the released unit is in the same window");
    exhausted(&*g, "k1 after re-reserving the released unit").await;
    h.finish().await
}

/// Given gate k2 exhausted after three reservations in a window that is a multiple of 10 s,
/// when the clock advances 10 s, then three more succeed in the next window (10 s later) and
/// the fourth is exhausted.
pub async fn q2_quota_window_rotate(factory: &dyn Factory) -> CaseResult {
    let h = quota_harness(factory).await?;
    let g = gate(&*h.broker, "k2")?;
    let first = reserve_three(&h, &*g, "k2 window 1").await;
    exhausted(&*g, "k2 window 1 fourth").await;
    assert_eq!(first[0].window % 10, 0, "window {} is not a multiple of 10", first[0].window);
    h.advance(PERIOD);
    let second = reserve_three(&h, &*g, "k2 window 2").await;
    assert!(second[0].window > first[0].window, "the window did not move forward");
    assert_eq!(second[0].window, first[0].window + 10, "the next window starts 10 s later");
    exhausted(&*g, "k2 window 2 fourth").await;
    h.finish().await
}

/// Given one k3 unit reserved in window 1, when the clock advances 10 s and three units are
/// reserved (then exhausted), then releasing the window-1 unit succeeds and the current window
/// stays exhausted.
pub async fn q3_quota_stale_release(factory: &dyn Factory) -> CaseResult {
    let h = quota_harness(factory).await?;
    let g = gate(&*h.broker, "k3")?;
    let old = reserve(&*g, "k3 window 1").await;
    h.advance(PERIOD);
    let current = reserve_three(&h, &*g, "k3 window 2").await;
    assert!(current[0].window > old.window, "the window did not move forward");
    exhausted(&*g, "k3 window 2 fourth").await;
    g.release(old).await?;
    exhausted(&*g, "k3 after releasing a unit of the old window").await;
    h.finish().await
}

/// Given gates ka and kb, when ka is exhausted, then kb still reserves. Given two gates s1 and
/// s2 on key `shared`, when s1, s2, s1 reserve, then all succeed and both s2 and s1 are then
/// exhausted.
pub async fn q4_quota_key_isolation(factory: &dyn Factory) -> CaseResult {
    let h = quota_harness(factory).await?;
    let (ka, kb) = (gate(&*h.broker, "ka")?, gate(&*h.broker, "kb")?);
    reserve_three(&h, &*ka, "ka").await;
    exhausted(&*ka, "ka fourth").await;
    reserve(&*kb, "kb while ka is exhausted").await;
    let (s1, s2) = (gate(&*h.broker, "shared")?, gate(&*h.broker, "shared")?);
    reserve(&*s1, "shared via s1 (1)").await;
    reserve(&*s2, "shared via s2 (2)").await;
    reserve(&*s1, "shared via s1 (3)").await;
    exhausted(&*s2, "shared via s2 after three").await;
    exhausted(&*s1, "shared via s1 after three").await;
    h.finish().await
}

/// How many reserves race in q5.
const RACERS: usize = 24;

/// Given gate k5 on two handles of one storage, when 24 reserves run at once, then exactly
/// three return a reservation (all in one window), the others report exhaustion, and none
/// fails.
pub async fn q5_quota_concurrent_race(factory: &dyn Factory) -> CaseResult {
    let h = quota_harness(factory).await?;
    let second = h.second_handle().await?;
    let gates = [gate(&*h.broker, "k5")?, gate(&*second, "k5")?];
    let barrier = Arc::new(Barrier::new(RACERS));
    let racers: Vec<_> = (0..RACERS)
        .map(|i| {
            let (gate, barrier) = (gates[i % 2].clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                gate.reserve().await
            })
        })
        .collect();
    let mut reserved = Vec::new();
    for racer in racers {
        match tokio::time::timeout(SAFETY_TIMEOUT, racer).await {
            Ok(Ok(Ok(Some(r)))) => reserved.push(r),
            Ok(Ok(Ok(None))) => {}
            Ok(Ok(Err(e))) => panic!("a concurrent reserve failed: {e}"),
            Ok(Err(join)) => panic!("a concurrent reserve panicked: {join}"),
            Err(_) => panic!("a concurrent reserve did not return within {SAFETY_TIMEOUT:?}"),
        }
    }
    let window = current_window(&h);
    let windows: BTreeSet<i64> = reserved.iter().map(|r| r.window).collect();
    assert_eq!(reserved.len(), 3, "24 concurrent reserves with limit 3 (windows {windows:?})");
    assert_eq!(windows, BTreeSet::from([window]), "the race reserved in the current window");
    h.finish().await
}

/// Quota windows are the storage's time, never a handle's own clock (contract §9.4). Given
/// the two handles of c37's world (no injected clock; in the server form A's local clock
/// 1 h 7 s ahead of the server's and B's 1 h 3 s behind) and gates on key kc (limit 3 per
/// 10 s) on each, when they reserve at S + 2 s, then A, B, A get window S and B's fourth is
/// exhausted; at S + 10 s A and B get window S + 10 s, A's third at S + 19.999 s too, and B's
/// fourth is exhausted; at S + 20 s B gets window S + 20 s.
pub async fn c38_quota_by_server_clock(factory: &dyn Factory) -> CaseResult {
    let w = ClockWorld::open(factory).await?;
    if let Err(e) = Need::Quota.check(&*w.a) {
        w.finish().await?;
        return Err(e);
    }
    let (ga, gb) = (gate(&*w.a, "kc")?, gate(&*w.b, "kc")?);
    let window = |w: &ClockWorld, secs: u64| w.at(Duration::from_secs(secs)).as_secs();
    w.set(Duration::from_secs(2)).await?;
    for (i, g) in [&ga, &gb, &ga].into_iter().enumerate() {
        let got = reserve(&**g, &format!("reservation {} at S + 2 s", i + 1)).await;
        assert_eq!(got.window, window(&w, 0), "reservation {} at S + 2 s: window", i + 1);
    }
    exhausted(&*gb, "B's fourth reservation at S + 2 s (the window has its three)").await;
    w.set(PERIOD).await?;
    assert_eq!(reserve(&*ga, "A at S + 10 s").await.window, window(&w, 10), "A at S + 10 s");
    assert_eq!(reserve(&*gb, "B at S + 10 s").await.window, window(&w, 10), "B at S + 10 s");
    w.set(Duration::from_millis(19_999)).await?;
    let third = reserve(&*ga, "A at S + 19.999 s").await;
    assert_eq!(third.window, window(&w, 10), "A at S + 19.999 s: still the window of S + 10 s");
    exhausted(&*gb, "B at S + 19.999 s (the window of S + 10 s has its three)").await;
    w.set(2 * PERIOD).await?;
    assert_eq!(reserve(&*gb, "B at S + 20 s").await.window, window(&w, 20), "B at S + 20 s");
    w.finish().await
}
