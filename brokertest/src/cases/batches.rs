//! Batches and cancel-safe claims (extensions §E8, §E0; decisions "API shape", "Claims").

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use taskgate::{AckItem, Broker, ErrorKind, Status, Task};
use tokio::sync::Barrier;

use super::check::{expect_err, expect_invalid, ids, stored_ids};
use crate::{task, within, CaseResult, Factory, Harness, REAL_WINDOW, SAFETY_TIMEOUT, WAIT_LIMIT};

/// Given stored task `pre`, when a batch holds one bad item (an empty type, a missing or later
/// parent, an ID or key used twice, an ID already stored), then enqueue_many fails with that
/// item's error and stores none of the batch. A batch of 25 tasks in qb and a child of the
/// first is stored whole, in order. A max of 0 is `InvalidInput` (max) and no queues
/// `InvalidInput` (queues). dequeue_many(qb, 10) claims t00..t09, each running with its own
/// token. ack_many with a stale token and an unknown ID among three good items (one of them
/// without a result) completes the good ones with their own results (waking the child) and
/// fails only those two (`LeaseLost`, `NotFound`). Eight
/// concurrent dequeue_many loops on two handles never receive a task twice.
pub async fn c28_batches(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    all_or_nothing(&h).await;
    let batch: Vec<Task> = numbered("t", 25, "qb")
        .into_iter()
        .chain([task("kid", "job", "qc").with_depends_on(["t00"])])
        .collect();
    let stored = h.broker.enqueue_many(&batch).await?;
    let got: Vec<(&str, Status)> = stored.iter().map(|t| (t.id.as_str(), t.status)).collect();
    let want: Vec<(&str, Status)> = batch
        .iter()
        .map(|t| (t.id.as_str(), if t.id == "kid" { Status::Blocked } else { Status::Pending }))
        .collect();
    assert_eq!(got, want, "enqueue_many returns the stored batch in order");
    bad_claim_arguments(&h).await?;
    let claimed = claim_batch(&*h.broker, &["qb"], 10).await;
    let claimed_ids: BTreeSet<String> = claimed.keys().cloned().collect();
    let first_ten: Vec<String> = (0..10).map(|i| format!("t{i:02}")).collect();
    assert_eq!(claimed_ids, first_ten.iter().cloned().collect(), "dequeue_many(qb, 10)");
    ack_many_partial(&h, &claimed).await?;
    concurrent_claims(&h).await?;
    h.finish().await
}

/// `n` tasks `<prefix>00`… in `queue`.
fn numbered(prefix: &str, n: usize, queue: &str) -> Vec<Task> {
    (0..n).map(|i| task(&format!("{prefix}{i:02}"), "job", queue)).collect()
}

async fn all_or_nothing(h: &Harness) {
    h.enqueue(task("pre", "job", "qx")).await;
    let t = |id: &str| task(id, "job", "qx");
    let r = h.broker.enqueue_many(&[t("b1"), Task::new("", "qx").with_id("b2"), t("b3")]).await;
    expect_invalid(r, "type", "a batch with an empty type");
    let r = h.broker.enqueue_many(&[t("c1"), t("c2").with_depends_on(["missing"])]).await;
    expect_err(r, ErrorKind::NotFound, "a batch with a missing parent");
    let r = h.broker.enqueue_many(&[t("g1").with_depends_on(["g2"]), t("g2")]).await;
    expect_err(r, ErrorKind::NotFound, "a batch whose task depends on a later one");
    let r = h.broker.enqueue_many(&[t("d1"), t("d1")]).await;
    expect_err(r, ErrorKind::TaskExists, "a batch with one ID twice");
    let keyed = |id: &str| t(id).with_business_key("bk");
    let r = h.broker.enqueue_many(&[keyed("k1"), keyed("k2")]).await;
    expect_err(r, ErrorKind::TaskExists, "a batch with one business key twice");
    let r = h.broker.enqueue_many(&[t("e1"), t("pre")]).await;
    expect_err(r, ErrorKind::TaskExists, "a batch with an ID already stored");
    match stored_ids(&*h.broker).await {
        Ok(got) => assert_eq!(got, ids(&["pre"]), "failed batches stored tasks"),
        Err(e) => panic!("list: {e}"),
    }
}

async fn bad_claim_arguments(h: &Harness) -> CaseResult {
    expect_invalid(h.broker.dequeue_many(&["qb"], 0).await, "max", "dequeue_many max 0");
    expect_invalid(h.broker.try_dequeue_many(&["qb"], 0).await, "max", "try_dequeue_many max 0");
    expect_invalid(
        h.broker.dequeue_many(&[] as &[&str; 0], 3).await,
        "queues",
        "dequeue_many no queues",
    );
    expect_invalid(
        h.broker.try_dequeue_many(&[] as &[&str; 0], 3).await,
        "queues",
        "try_dequeue_many no queues",
    );
    assert_eq!(h.broker.queue_len("qb").await?, 25, "rejected claims claimed something");
    Ok(())
}

/// A dequeue_many that must return within 5 s; asserts every task is running with its own,
/// distinct token, and returns them by ID.
async fn claim_batch(b: &dyn Broker, queues: &[&str], max: usize) -> BTreeMap<String, Task> {
    let tasks = match tokio::time::timeout(SAFETY_TIMEOUT, b.dequeue_many(&queues, max)).await {
        Ok(Ok(tasks)) => tasks,
        Ok(Err(e)) => panic!("dequeue_many({queues:?}, {max}) failed: {e}"),
        Err(_) => panic!("dequeue_many({queues:?}, {max}) claimed nothing within 5 s"),
    };
    assert_eq!(tasks.len(), max, "dequeue_many({queues:?}, {max}) over enough ready tasks");
    let tokens: BTreeSet<&str> = tasks.iter().map(|t| t.lease_token.as_str()).collect();
    assert_eq!(tokens.len(), max, "each claimed task has its own token");
    assert!(!tokens.contains(""), "a claimed task without a token");
    assert!(tasks.iter().all(|t| t.status == Status::Running), "claimed tasks are running");
    let by_id: BTreeMap<String, Task> = tasks.into_iter().map(|t| (t.id.clone(), t)).collect();
    assert_eq!(by_id.len(), max, "dequeue_many returned a task twice");
    by_id
}

/// t05 is requeued and claimed again; ack_many then gets t00, t01, t02 with their tokens, t05
/// with its stale token and an unknown ID.
async fn ack_many_partial(h: &Harness, claimed: &BTreeMap<String, Task>) -> CaseResult {
    let token = |id: &str| claimed[id].lease_token.clone();
    h.broker.requeue("t05", &token("t05")).await?;
    let again = h.dequeue(&["qb"]).await;
    assert_eq!(again.id, "t05", "the requeued t05 is first in claim order");
    let item = |id: &str, token: String| AckItem { id: id.into(), token, result: Some(id.into()) };
    // t01 carries no result beside items that do: each row gets its own (or none).
    let no_result = AckItem { result: None, ..item("t01", token("t01")) };
    let items = [
        item("t00", token("t00")),
        item("t05", token("t05")),
        no_result,
        item("ghost", "no-token".into()),
        item("t02", token("t02")),
    ];
    let results = h.broker.ack_many(&items).await?;
    let kinds: Vec<Option<ErrorKind>> =
        results.iter().map(|r| r.as_ref().err().map(|e| e.kind())).collect();
    let want = [None, Some(ErrorKind::LeaseLost), None, Some(ErrorKind::NotFound), None];
    assert_eq!(kinds, want, "ack_many per-item outcomes");
    for (id, result) in [("t00", Some(&b"t00"[..])), ("t01", None), ("t02", Some(&b"t02"[..]))] {
        let t = h.get(id).await;
        assert_eq!((t.status, t.result.as_deref()), (Status::Completed, result), "{id}");
    }
    let t05 = h.get("t05").await;
    assert_eq!(
        (t05.status, t05.lease_token.as_str()),
        (Status::Running, again.lease_token.as_str()),
        "t05"
    );
    assert_eq!(t05.result, None, "the stale item wrote a result");
    assert_eq!(h.get("kid").await.status, Status::Pending, "ack_many of t00 wakes its child");
    h.broker.ack("t05", &again.lease_token, None).await?;
    Ok(())
}

/// How many claim loops race in c28.
const WORKERS: usize = 8;
/// Tasks they race for.
const RACE_TASKS: usize = 60;

/// 60 tasks in qr; 8 loops (alternating handles) call dequeue_many(qr, 4) until a call finds
/// nothing within 100 ms. No task is received twice; every received task is running with the
/// token its receiver got; the rest are pending and claimable.
async fn concurrent_claims(h: &Harness) -> CaseResult {
    h.broker.enqueue_many(&numbered("r", RACE_TASKS, "qr")).await?;
    let handles = [h.broker.clone(), h.second_handle().await?];
    let barrier = Arc::new(Barrier::new(WORKERS));
    let workers: Vec<_> = (0..WORKERS)
        .map(|i| tokio::spawn(claim_loop(handles[i % 2].clone(), barrier.clone())))
        .collect();
    let mut received: BTreeMap<String, String> = BTreeMap::new();
    for (k, worker) in workers.into_iter().enumerate() {
        for t in within(WAIT_LIMIT, format!("claim loop {k}"), worker).await? {
            if let Some(other) = received.insert(t.id.clone(), t.lease_token) {
                panic!("{} was received twice (tokens {other} and another)", t.id);
            }
        }
    }
    for (id, token) in &received {
        let t = h.get(id).await;
        assert_eq!((t.status, &t.lease_token), (Status::Running, token), "received {id}");
    }
    let all_ids: Vec<String> = (0..RACE_TASKS).map(|i| format!("r{i:02}")).collect();
    settle(&*h.broker, &all_ids, &received).await?;
    let rest = drain(&*h.broker, "qr").await?;
    let all: BTreeSet<String> = received.keys().chain(rest.iter()).cloned().collect();
    assert_eq!(all.len(), RACE_TASKS, "received {} + left {} tasks", received.len(), rest.len());
    assert!(rest.iter().all(|id| !received.contains_key(id)), "a received task was claimable");
    Ok(())
}

async fn claim_loop(broker: Arc<dyn Broker>, barrier: Arc<Barrier>) -> Vec<Task> {
    barrier.wait().await;
    let mut got = Vec::new();
    loop {
        match tokio::time::timeout(REAL_WINDOW, broker.dequeue_many(&["qr"], 4)).await {
            Err(_) => return got,
            Ok(Ok(tasks)) => {
                assert!(!tasks.is_empty(), "dequeue_many returned no task");
                got.extend(tasks);
            }
            Ok(Err(e)) => panic!("concurrent dequeue_many failed: {e}"),
        }
    }
}

/// Waits (up to 5 s real time, looking every 10 ms) until no task of `ids` that nobody
/// received is still running: a dropped claim hands its tasks back at once, but a backend that
/// runs the claim on a spawned task may need a round trip to do it. Panics naming the rest.
async fn settle(
    b: &dyn Broker,
    ids: &[String],
    held: &BTreeMap<String, String>,
) -> Result<(), taskgate::Error> {
    let started = Instant::now();
    loop {
        let mut orphans = Vec::new();
        for id in ids.iter().filter(|id| !held.contains_key(*id)) {
            if b.get(id).await?.status == Status::Running {
                orphans.push(id.clone());
            }
        }
        if orphans.is_empty() {
            return Ok(());
        }
        if started.elapsed() >= SAFETY_TIMEOUT {
            panic!(
                "running without a holder {SAFETY_TIMEOUT:?} after the claims ended: {orphans:?}"
            );
        }
        tokio::time::sleep(SETTLE_POLL).await;
    }
}

/// How often [`settle`] looks.
const SETTLE_POLL: Duration = Duration::from_millis(10);

/// Claims everything ready in `queue` without waiting; returns the IDs.
async fn drain(b: &dyn Broker, queue: &str) -> Result<Vec<String>, taskgate::Error> {
    let mut ids = Vec::new();
    loop {
        let tasks = b.try_dequeue_many(&[queue], 100).await?;
        if tasks.is_empty() {
            return Ok(ids);
        }
        ids.extend(tasks.into_iter().map(|t| t.id));
    }
}

/// Tasks c29 feeds in while claims are dropped.
const ARRIVALS: usize = 120;
/// Claim loops in c29.
const CLAIMERS: usize = 8;
/// Each claim loop's rounds at least (and after the producer finished).
const MIN_ROUNDS: usize = 60;

/// Given 120 tasks arriving in qz one by one, when 8 loops on two handles keep starting
/// dequeue / dequeue_many / try_dequeue_many calls and drop them at random points (small real
/// timeouts, or aborting a spawned call after a random number of scheduler turns), then every
/// task is either running under the token of a caller that received it, or pending with no
/// counter changed and immediately claimable — none running without a holder, none received
/// twice.
pub async fn c29_dequeue_cancel_safety(factory: &dyn Factory) -> CaseResult {
    let h = Harness::new(factory).await?;
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(1, |d| d.as_secs().wrapping_mul(1_000_000_007) ^ u64::from(d.subsec_nanos()));
    let handles = [h.broker.clone(), h.second_handle().await?];
    let done = Arc::new(AtomicBool::new(false));
    let claimers: Vec<_> = (0..CLAIMERS)
        .map(|i| {
            let rng = Rng::new(seed, i);
            tokio::spawn(drop_claims(handles[i % 2].clone(), done.clone(), rng))
        })
        .collect();
    for i in 0..ARRIVALS {
        h.enqueue(task(&format!("a{i:03}"), "job", "qz")).await;
        tokio::task::yield_now().await;
    }
    done.store(true, Ordering::SeqCst);
    let mut held: BTreeMap<String, String> = BTreeMap::new();
    for (k, claimer) in claimers.into_iter().enumerate() {
        for t in within(WAIT_LIMIT, format!("claim loop {k} (seed {seed})"), claimer).await? {
            if held.insert(t.id.clone(), t.lease_token).is_some() {
                panic!("{} was received twice (seed {seed})", t.id);
            }
        }
    }
    check_holders(&h, &held, seed).await?;
    h.finish().await
}

/// After the race: held tasks run under their holder's token; the others are pending,
/// untouched and claimable.
///
/// [`settle`] is a snapshot, not quiescence: a dropped caller's claim that a backend finishes
/// on a spawned task can take a task after `settle`'s pass and hand it back a moment later. So
/// the tasks are read again, up to [`SAFETY_TIMEOUT`], until one read sees no unreceived task
/// running; every assertion below then applies to that read.
async fn check_holders(h: &Harness, held: &BTreeMap<String, String>, seed: u64) -> CaseResult {
    let all_ids: Vec<String> = (0..ARRIVALS).map(|i| format!("a{i:03}")).collect();
    let started = Instant::now();
    let tasks = loop {
        settle(&*h.broker, &all_ids, held).await?;
        let mut tasks = Vec::with_capacity(all_ids.len());
        for id in &all_ids {
            tasks.push(h.get(id).await);
        }
        let stray = |t: &Task| t.status == Status::Running && !held.contains_key(&t.id);
        if !tasks.iter().any(stray) || started.elapsed() >= SAFETY_TIMEOUT {
            break tasks;
        }
    };
    let mut pending = BTreeSet::new();
    for t in tasks {
        let counters = (t.attempts, t.lease_lost, t.throttled);
        assert_eq!(
            counters,
            (0, 0, 0),
            "{}: a dropped claim changed a counter (seed {seed})",
            t.id
        );
        match held.get(&t.id) {
            Some(token) => assert_eq!(
                (t.status, &t.lease_token),
                (Status::Running, token),
                "{}: received, so running under its receiver's token (seed {seed})",
                t.id
            ),
            None => {
                let what = "nobody received it, so it must be pending";
                assert_eq!(t.status, Status::Pending, "{}: {what} (seed {seed})", t.id);
                pending.insert(t.id);
            }
        }
    }
    let claimable: BTreeSet<String> = drain(&*h.broker, "qz").await?.into_iter().collect();
    assert_eq!(claimable, pending, "the unreceived tasks are claimable at once (seed {seed})");
    Ok(())
}

/// One claim loop: random claim calls, most of them dropped before they finish; returns what
/// it received.
async fn drop_claims(broker: Arc<dyn Broker>, done: Arc<AtomicBool>, mut rng: Rng) -> Vec<Task> {
    let mut held = Vec::new();
    let mut rounds = 0;
    while rounds < MIN_ROUNDS || !done.load(Ordering::SeqCst) {
        rounds += 1;
        match rng.below(4) {
            0 => held.extend(abort_after_turns(&broker, rng.below(20)).await),
            1 => {
                let call = broker.dequeue(&["qz"]);
                if let Ok(r) = tokio::time::timeout(rng.micros(3_000), call).await {
                    held.push(expect_claim(r.map(|t| vec![t])).remove(0));
                }
            }
            2 => {
                let call = broker.dequeue_many(&["qz"], 1 + rng.below(4));
                if let Ok(r) = tokio::time::timeout(rng.micros(3_000), call).await {
                    held.extend(expect_claim(r));
                }
            }
            _ => {
                let call = broker.try_dequeue_many(&["qz"], 1 + rng.below(3));
                if let Ok(r) = tokio::time::timeout(rng.micros(1_000), call).await {
                    held.extend(expect_claim(r));
                }
            }
        }
    }
    held
}

/// Spawns a dequeue_many and aborts it after `turns` scheduler turns; what it returned before
/// the abort took effect was received.
async fn abort_after_turns(broker: &Arc<dyn Broker>, turns: usize) -> Vec<Task> {
    let b = broker.clone();
    let call = tokio::spawn(async move { b.dequeue_many(&["qz"], 2).await });
    for _ in 0..turns {
        tokio::task::yield_now().await;
    }
    call.abort();
    match within(SAFETY_TIMEOUT, "an aborted dequeue_many", call).await {
        Ok(r) => expect_claim(r),
        Err(join) if join.is_cancelled() => Vec::new(),
        Err(join) => panic!("an aborted dequeue_many panicked: {join}"),
    }
}

fn expect_claim(r: taskgate::Result<Vec<Task>>) -> Vec<Task> {
    match r {
        Ok(tasks) => tasks,
        Err(e) => panic!("a claim that finished failed: {e}"),
    }
}

/// A small xorshift generator: random drop points without a dependency. The seed is printed
/// with every failure so a run can be repeated.
struct Rng(u64);

impl Rng {
    /// The generator of claim loop `i`.
    fn new(seed: u64, i: usize) -> Self {
        let i = u64::try_from(i).unwrap_or(0);
        Rng(seed.wrapping_mul(2 * i + 1) | 1)
    }

    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        let n64 = u64::try_from(n).unwrap_or(u64::MAX);
        usize::try_from(self.next() % n64).unwrap_or(0)
    }

    fn micros(&mut self, max: u64) -> Duration {
        Duration::from_micros(self.next() % max)
    }
}
