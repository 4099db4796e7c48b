//! Races forced into one interleaving, for backends whose write transactions can be held open
//! at their commit (the SQL engine's `set_before_commit_hook`, feature `test-hooks`).
//!
//! The contract's race cases (c03, c22, c28, c32, q5) start many calls at once and catch a
//! broken critical section only when the scheduler happens to interleave them badly. Here the
//! bad interleaving is made on purpose: handle A runs a write and stops after its reads and
//! writes, just before its commit, holding its row locks; handle B then runs the racing call;
//! once B has finished, or is seen waiting for a lock (where the backend can see that), A
//! commits. The outcome is then fixed, so one run proves what many random ones only suggest:
//!
//! * [`claim_race`] — a claim never takes a task another claim holds, and does not wait for it
//!   (`SKIP LOCKED`);
//! * [`writers_pass_held_claim`] — while a claim holds its rows, an enqueue, an ack of another
//!   task, a claim and the reaper all go ahead without waiting for it;
//! * [`reap_during_held_ack`] — the reaper neither waits for nor overwrites a task whose ack
//!   is committing;
//! * [`ack_during_held_reap`] — an ack of a lease the reaper is taking away loses it
//!   (`LeaseLost`), and the task stays reaped;
//! * [`identity_race`] — two enqueues of one business key, or of one ID, store one task; the
//!   loser gets `TaskExists` naming the winner;
//! * [`quota_race`] — two reserves of a window with one unit left admit one;
//! * [`deadlock_race`] — a deadlock the database reports between a broker write and another
//!   writer is retried by the broker and never reaches its caller (backends whose writers can
//!   deadlock: PostgreSQL, MySQL/MariaDB; SQLite has one writer at a time);
//! * [`audit_atomic_race`] — an audited action and its record commit together: at every commit
//!   point of the action another handle sees both or neither, and a failure forced at any of
//!   them leaves both or neither (contract §E13, c51's rule under a fault).
//!
//! A backend plugs in a [`RaceRig`] and [`race_tests!`](crate::race_tests). Tests built by the
//! macro run on a multi-threaded runtime: a held transaction blocks its thread (through
//! `tokio::task::block_in_place`, so the runtime moves its other tasks away).

use std::sync::{mpsc, Arc, Mutex, PoisonError};
use std::time::Duration;

use async_trait::async_trait;
use taskgate::{
    BoxError, Broker, BrokerOptions, Clock, Error, ErrorKind, ManualClock, QuotaConfig, Status,
    Task,
};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::{within, CaseResult, TEST_LIMIT, WAIT_LIMIT};
use std::sync::atomic::{AtomicUsize, Ordering};
use taskgate::{AdminAction, AuditQuery};

/// A before-commit hook, called with the operation's name (the SQL engine's
/// `BeforeCommitHook` has this shape).
pub type CommitHook = Arc<dyn Fn(&str) + Send + Sync>;

/// What a backend provides for the races: fresh storage with two handles.
#[async_trait]
pub trait RaceRig: Send + Sync {
    /// Fresh storage and two handles on it, both initialised with `options`: A, whose write
    /// transactions can be held before their commit, and B (its own connections).
    async fn open(&self, options: BrokerOptions) -> Result<Box<dyn RacePair>, BoxError>;
}

/// Two handles on one storage, from [`RaceRig::open`].
#[async_trait]
pub trait RacePair: Send + Sync {
    /// Handle A.
    fn a(&self) -> Arc<dyn Broker>;
    /// Handle B.
    fn b(&self) -> Arc<dyn Broker>;
    /// Installs `hook` as A's before-commit hook; `None` removes it.
    fn set_a_hook(&self, hook: Option<CommitHook>);
    /// Whether a transaction of B waits for a lock right now; `None` when the backend cannot
    /// see it (SQLite: B waits for the one writer lock inside the driver).
    async fn b_waits(&self) -> Option<bool>;
    /// Closes both handles and removes the storage.
    async fn finish(self: Box<Self>) -> Result<(), BoxError>;

    /// A plain transaction on the storage, outside every broker handle, that takes task rows'
    /// write locks (another application writing the same tables), for [`deadlock_race`]. It
    /// must lose no deadlock it takes part in to B: it is the larger transaction (it has changed
    /// more rows), and on a server that picks the victim by timing it checks for deadlocks later
    /// than B does. `None` (the default) where two writers cannot deadlock (one writer at a
    /// time: SQLite).
    async fn foreign_writer(&self) -> Option<Result<Box<dyn ForeignWriter>, BoxError>> {
        None
    }
}

/// A transaction of another writer on a race's storage (see [`RacePair::foreign_writer`]).
#[async_trait]
pub trait ForeignWriter: Send {
    /// Takes the write lock of task `id`'s row by changing the row (a change the rollback
    /// undoes), waiting for it if another transaction holds it.
    async fn lock(&mut self, id: &str) -> Result<(), BoxError>;
    /// Rolls the transaction back, releasing its locks.
    async fn rollback(self: Box<Self>) -> Result<(), BoxError>;
}

/// A handle's next transaction of one operation, stopped before its commit (its reads and
/// writes done, its row locks held) until released.
///
/// ```ignore
/// let mut held = CommitHold::arm(|hook| broker.engine().set_before_commit_hook(hook), "resume");
/// let resumer = tokio::spawn(async move { broker.resume("c").await });
/// held.entered().await;   // the resume holds c's and its parent's locks now
/// // … run the racing call …
/// held.release();
/// ```
///
/// The hook blocks the transaction's thread through `tokio::task::block_in_place`: use a
/// multi-threaded runtime. It holds at most [`WAIT_LIMIT`], so a test that never releases
/// still ends.
pub struct CommitHold {
    entered: Option<oneshot::Receiver<()>>,
    go: Option<mpsc::Sender<()>>,
    op: &'static str,
}

impl CommitHold {
    /// Installs, through `install`, a before-commit hook that stops the next transaction named
    /// `op` until [`CommitHold::release`] (later ones pass).
    pub fn arm(install: impl FnOnce(Option<CommitHook>), op: &'static str) -> CommitHold {
        let (entered_tx, entered) = oneshot::channel();
        let (go, go_rx) = mpsc::channel::<()>();
        let entered_tx = Mutex::new(Some(entered_tx));
        let go_rx = Mutex::new(go_rx);
        install(Some(Arc::new(move |name: &str| {
            if name != op {
                return;
            }
            let Some(entered) = entered_tx.lock().unwrap_or_else(PoisonError::into_inner).take()
            else {
                return;
            };
            let _ = entered.send(());
            // The thread waits; the runtime hands its other tasks to another thread. The wait
            // is bounded: a test that never releases still ends.
            tokio::task::block_in_place(|| {
                let rx = go_rx.lock().unwrap_or_else(PoisonError::into_inner);
                let _ = rx.recv_timeout(WAIT_LIMIT);
            });
        })));
        CommitHold { entered: Some(entered), go: Some(go), op }
    }

    /// Waits (up to [`WAIT_LIMIT`]) until the held transaction reached its commit.
    pub async fn entered(&mut self) {
        let Some(entered) = self.entered.take() else { return };
        let what = format!("A's {} transaction to reach its commit", self.op);
        if within(WAIT_LIMIT, what, entered).await.is_err() {
            panic!("A's {} hook was dropped before it ran", self.op);
        }
    }

    /// Lets the held transaction commit.
    pub fn release(&mut self) {
        if let Some(go) = self.go.take() {
            let _ = go.send(());
        }
    }
}

impl Drop for CommitHold {
    fn drop(&mut self) {
        self.release();
    }
}

/// Holds A's next `op` transaction before its commit.
fn hold_a(pair: &dyn RacePair, op: &'static str) -> CommitHold {
    CommitHold::arm(|hook| pair.set_a_hook(hook), op)
}

/// What B's racing call did while A was held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Seen {
    /// B returned while A still held its locks.
    Finished,
    /// B waited for a lock (A's).
    Waited,
    /// The backend cannot tell whether B waits (SQLite); A is released at once.
    Unknown,
}

/// Watches B's call (spawned) while A is held: until it returns or waits for a lock.
async fn watch<T>(pair: &dyn RacePair, b: &JoinHandle<T>, what: &str) -> Seen {
    let deadline = tokio::time::Instant::now() + WAIT_LIMIT;
    loop {
        if b.is_finished() {
            return Seen::Finished;
        }
        match pair.b_waits().await {
            Some(true) => return Seen::Waited,
            None => {
                // Give B's call a few turns to get going; its order with A's commit is then
                // the database's (one writer), not the test's.
                for _ in 0..8 {
                    tokio::task::yield_now().await;
                }
                return if b.is_finished() { Seen::Finished } else { Seen::Unknown };
            }
            Some(false) => {}
        }
        if tokio::time::Instant::now() >= deadline {
            panic!("{what}: neither returned nor waited for a lock within {WAIT_LIMIT:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The result of a spawned call.
async fn joined<T>(call: JoinHandle<T>, what: &str) -> T {
    match within(WAIT_LIMIT, what, call).await {
        Ok(v) => v,
        Err(join) => panic!("{what} panicked: {join}"),
    }
}

fn spawn<T: Send + 'static>(
    fut: impl std::future::Future<Output = T> + Send + 'static,
) -> JoinHandle<T> {
    tokio::spawn(fut)
}

/// The options of every race: the suite's, on a manual clock.
fn options(clock: &ManualClock) -> BrokerOptions {
    BrokerOptions {
        default_lease_ttl: Duration::from_secs(60),
        lease_lost_max: 3,
        throttled_max: 100,
        clock: Some(Arc::new(clock.clone()) as Arc<dyn Clock>),
        ..BrokerOptions::default()
    }
}

/// Given ready tasks c1, c2, c3 and A's `try_dequeue_many(2)` held before its commit (c1 and
/// c2 claimed and locked), when B runs `try_dequeue_many(3)`, then B returns c3 alone without
/// waiting for A's locks, and after A commits c1 and c2 run under A's tokens and c3 under B's.
///
/// Catches a claim that reads its candidates without locking them (B claims c1 and c2 again
/// once A commits) and a claim that locks without `SKIP LOCKED` (B waits for A).
pub async fn claim_race(rig: &dyn RaceRig) -> CaseResult {
    let clock = ManualClock::at_contract_epoch();
    let pair = rig.open(options(&clock)).await?;
    let (a, b) = (pair.a(), pair.b());
    for id in ["c1", "c2", "c3"] {
        a.enqueue(&Task::new("job", "race").with_id(id)).await?;
    }
    let mut held = hold_a(&*pair, "dequeue");
    let a_call = spawn(async move { a.try_dequeue_many(&["race"], 2).await });
    held.entered().await;
    let b_call = spawn(async move { b.try_dequeue_many(&["race"], 3).await });
    let seen = watch(&*pair, &b_call, "B's claim").await;
    held.release();
    let a_got = joined(a_call, "A's claim").await?;
    let b_got = joined(b_call, "B's claim").await?;
    pair.set_a_hook(None);
    let ids = |ts: &[Task]| ts.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&a_got), ["c1", "c2"], "A's claim");
    assert_eq!(ids(&b_got), ["c3"], "B claimed while A held c1 and c2 (A's claim must lock them)");
    assert_ne!(seen, Seen::Waited, "B's claim waited for A's locked rows (SKIP LOCKED missing)");
    for t in a_got.iter().chain(&b_got) {
        let stored = pair.a().get(&t.id).await?;
        assert_eq!((stored.status, &stored.lease_token), (Status::Running, &t.lease_token));
    }
    pair.finish().await
}

/// Runs `call` on a spawned task while A (`held`) holds its transaction; returns its result
/// and what it did. Where the backend cannot see lock waits (SQLite's one writer), A is let go
/// at once: the call then runs after A's commit.
async fn run_b<T: Send + 'static>(
    pair: &dyn RacePair,
    held: &mut CommitHold,
    call: impl std::future::Future<Output = T> + Send + 'static,
    what: &str,
) -> (T, Seen) {
    let call = spawn(call);
    let seen = watch(pair, &call, what).await;
    if seen != Seen::Finished {
        held.release();
    }
    (joined(call, what).await, seen)
}

/// Given `x` and `y` running under B's claims from T (60 s leases), `c1`, `c2`, `c3` ready in
/// queue race from T + 10 s, A's `try_dequeue_many(2)` held before its commit (c1 and c2
/// claimed and locked, leases to T + 70 s) and the clock then at T + 100 s (so c1 and c2, as
/// A writes them, look expired), when B in turn enqueues `n` into race due at T, acks `y`,
/// claims two tasks from race and reaps, then none of the four waits for A's locks: `n` is
/// stored, `y` completed, B claims `n` and `c3`, and the reap handles `x` alone (c1 and c2 are
/// A's); after A commits, c1 and c2 run under A's tokens and the next reap handles them. (On
/// SQLite, whose one writer serialises the two, B's calls run after A's commit, and the first
/// reap handles c1 and c2 too.)
///
/// Catches a reaper that locks expired leases without `SKIP LOCKED` (MySQL/MariaDB's locking
/// read meets A's rows and waits), and MySQL/MariaDB sessions at REPEATABLE READ (the claim's
/// gap locks make the enqueue of `n`, due before c1, wait).
pub async fn writers_pass_held_claim(rig: &dyn RaceRig) -> CaseResult {
    let clock = ManualClock::at_contract_epoch();
    let pair = rig.open(options(&clock)).await?;
    let (a, b) = (pair.a(), pair.b());
    let start = clock.now_ms();
    for id in ["x", "y"] {
        a.enqueue(&Task::new("job", "other").with_id(id)).await?;
    }
    let running = within(WAIT_LIMIT, "B's claim of x and y", b.dequeue_many(&["other"], 2)).await?;
    let ids = |ts: &[Task]| ts.iter().map(|t| t.id.clone()).collect::<Vec<_>>();
    assert_eq!(ids(&running), ["x", "y"], "B's claim from other");
    clock.advance(Duration::from_secs(10));
    for id in ["c1", "c2", "c3"] {
        a.enqueue(&Task::new("job", "race").with_id(id)).await?;
    }
    let mut held = hold_a(&*pair, "dequeue");
    let a_call = spawn(async move { a.try_dequeue_many(&["race"], 2).await });
    held.entered().await;
    clock.advance(Duration::from_secs(90));
    let n = Task::new("job", "race").with_run_at(start);
    let b1 = b.clone();
    let (stored, enqueued) =
        run_b(&*pair, &mut held, async move { b1.enqueue(&n).await }, "B's enqueue").await;
    let stored = stored?;
    let (b1, y_token) = (b.clone(), running[1].lease_token.clone());
    let (acked, acking) =
        run_b(&*pair, &mut held, async move { b1.ack("y", &y_token, None).await }, "B's ack").await;
    acked?;
    let b1 = b.clone();
    let (claimed, claiming) = run_b(
        &*pair,
        &mut held,
        async move { b1.try_dequeue_many(&["race"], 2).await },
        "B's claim",
    )
    .await;
    let claimed = claimed?;
    let b1 = b.clone();
    let (reaped, reaping) =
        run_b(&*pair, &mut held, async move { b1.reap_expired().await }, "B's reap").await;
    let reaped = reaped?;
    held.release();
    let a_got = joined(a_call, "A's claim").await?;
    pair.set_a_hook(None);
    let seen = [("enqueue", enqueued), ("ack", acking), ("claim", claiming), ("reap", reaping)];
    for (what, seen) in seen {
        assert_ne!(seen, Seen::Waited, "B's {what} waited for A's held claim");
    }
    let serial = seen.iter().any(|(_, s)| *s == Seen::Unknown);
    assert_eq!(ids(&a_got), ["c1", "c2"], "A's claim");
    assert_eq!(ids(&claimed), [stored.id.clone(), "c3".to_owned()], "B's claim (n is due first)");
    assert_eq!(b.get("y").await?.status, Status::Completed, "y after B's ack");
    let (first, later) = if serial { (3, 0) } else { (1, 2) };
    assert_eq!(reaped, first, "B's reap (x{})", if serial { ", c1 and c2" } else { " alone" });
    if !serial {
        for t in &a_got {
            let stored = b.get(&t.id).await?;
            assert_eq!((stored.status, &stored.lease_token), (Status::Running, &t.lease_token));
        }
    }
    assert_eq!(b.reap_expired().await?, later, "the reap after A's commit");
    pair.finish().await
}

/// Given task t claimed with a 60 s lease and the clock 61 s later, and A's ack of t held
/// before its commit, when B reaps, then B reaps nothing without waiting for A's lock, and
/// after A commits t is completed with A's result and LeaseLost 0; a later reap finds nothing.
///
/// Catches a reaper that reads expired leases without locking them and writes without
/// checking again (it overwrites the completed task with `pending`), and one that waits for
/// the finisher's lock instead of skipping the row.
pub async fn reap_during_held_ack(rig: &dyn RaceRig) -> CaseResult {
    let clock = ManualClock::at_contract_epoch();
    let pair = rig.open(options(&clock)).await?;
    let (a, b) = (pair.a(), pair.b());
    a.enqueue(&Task::new("job", "race").with_id("t")).await?;
    let claimed = within(WAIT_LIMIT, "the claim of t", a.dequeue(&["race"])).await?;
    clock.advance(Duration::from_secs(61));
    let mut held = hold_a(&*pair, "ack");
    let token = claimed.lease_token.clone();
    let a_call = spawn(async move { a.ack("t", &token, Some(b"done".to_vec())).await });
    held.entered().await;
    let b_call = spawn(async move { b.reap_expired().await });
    let seen = watch(&*pair, &b_call, "B's reap").await;
    held.release();
    let acked = joined(a_call, "A's ack").await;
    let reaped = joined(b_call, "B's reap").await?;
    pair.set_a_hook(None);
    assert!(acked.is_ok(), "A's ack of t: {acked:?}");
    let t = pair.a().get("t").await?;
    let got = (t.status, t.result.as_deref(), t.lease_lost);
    assert_eq!(got, (Status::Completed, Some(&b"done"[..]), 0), "the reaper overwrote the ack");
    assert_eq!(reaped, 0, "B's reap counted a lease whose ack was committing");
    assert_ne!(seen, Seen::Waited, "the reaper waited for the ack's row lock (skip it instead)");
    assert_eq!(pair.a().reap_expired().await?, 0, "a later reap");
    pair.finish().await
}

/// Given task t claimed with a 60 s lease, the clock 61 s later, and A's reap held before its
/// commit (t pending with LeaseLost 1, token cleared), when B acks t with the old token, then
/// B's ack fails with `LeaseLost` once A commits, and t stays pending with LeaseLost 1, no token
/// and no result.
///
/// Catches an ack that checks the token without locking the row and writes without checking
/// again (it completes a task the reaper took away).
pub async fn ack_during_held_reap(rig: &dyn RaceRig) -> CaseResult {
    let clock = ManualClock::at_contract_epoch();
    let pair = rig.open(options(&clock)).await?;
    let (a, b) = (pair.a(), pair.b());
    a.enqueue(&Task::new("job", "race").with_id("t")).await?;
    let claimed = within(WAIT_LIMIT, "the claim of t", b.dequeue(&["race"])).await?;
    clock.advance(Duration::from_secs(61));
    let mut held = hold_a(&*pair, "reap");
    let a_call = spawn(async move { a.reap_expired().await });
    held.entered().await;
    let token = claimed.lease_token.clone();
    let b_call = spawn(async move { b.ack("t", &token, Some(b"late".to_vec())).await });
    let seen = watch(&*pair, &b_call, "B's ack").await;
    held.release();
    let reaped = joined(a_call, "A's reap").await?;
    let acked = joined(b_call, "B's ack").await;
    pair.set_a_hook(None);
    assert_eq!(reaped, 1, "A's reap");
    assert_eq!(acked.map_err(|e| e.kind()), Err(ErrorKind::LeaseLost), "B's ack of a reaped lease");
    let t = pair.a().get("t").await?;
    let got = (t.status, t.lease_lost, t.lease_token.as_str(), t.result.as_deref());
    assert_eq!(got, (Status::Pending, 1, "", None), "t after the reap: an ack completed it");
    assert_ne!(seen, Seen::Finished, "B's ack returned while A held t: it never locked t");
    pair.finish().await
}

/// Given A's enqueue of a task with business key k held before its commit, when B enqueues
/// another task with key k, then B fails with `TaskExists` naming A's task once A commits, and
/// k has one execution; the same for two enqueues of one preset ID.
///
/// Catches an enqueue that only checks the key (or ID) before it inserts, with no unique
/// constraint behind the check, and a unique violation not reported as `TaskExists`.
pub async fn identity_race(rig: &dyn RaceRig) -> CaseResult {
    let clock = ManualClock::at_contract_epoch();
    let pair = rig.open(options(&clock)).await?;
    let first = Task::new("job", "race").with_id("first").with_business_key("k");
    let second = Task::new("job", "race").with_id("second").with_business_key("k");
    let (loser, seen) = enqueue_race(&*pair, first, second).await;
    let filter = taskgate::Filter { business_key: "k".into(), ..taskgate::Filter::default() };
    let keyed: Vec<String> = pair.a().list(&filter).await?.into_iter().map(|t| t.id).collect();
    assert_eq!(keyed, ["first"], "the executions of key k");
    match loser {
        Err(Error::TaskExists { existing: Some(e), .. }) => {
            assert_eq!((e.business_key.as_str(), e.execution_id.as_str()), ("k", "first"));
        }
        other => panic!("B's enqueue with key k: expected TaskExists naming first, got {other:?}"),
    }
    assert_ne!(seen, Seen::Finished, "B's enqueue with key k returned while A's was uncommitted");

    let one = Task::new("job", "race").with_id("same");
    let other = Task::new("job", "other").with_id("same");
    let (loser, seen) = enqueue_race(&*pair, one, other).await;
    assert_eq!(pair.a().get("same").await?.queue, "race", "A's task is the one stored");
    assert_eq!(loser.map_err(|e| e.kind()).err(), Some(ErrorKind::TaskExists), "B's same ID");
    assert_ne!(seen, Seen::Finished, "B's enqueue of A's ID returned while A's was uncommitted");
    pair.finish().await
}

/// Enqueues `first` on A (held before its commit), then `second` on B; returns B's result and
/// what B did while A was held.
async fn enqueue_race(
    pair: &dyn RacePair,
    first: Task,
    second: Task,
) -> (taskgate::Result<Task>, Seen) {
    let (a, b) = (pair.a(), pair.b());
    let mut held = hold_a(pair, "enqueue_many");
    let a_call = spawn(async move { a.enqueue(&first).await });
    held.entered().await;
    let b_call = spawn(async move { b.enqueue(&second).await });
    let seen = watch(pair, &b_call, "B's enqueue").await;
    held.release();
    let won = joined(a_call, "A's enqueue").await;
    pair.set_a_hook(None);
    assert!(won.is_ok(), "A's enqueue: {won:?}");
    (joined(b_call, "B's enqueue").await, seen)
}

/// Given a quota of one start per hour on key k and A's reserve held before its commit, when B
/// reserves, then B finds the window exhausted once A commits, and A holds the one unit.
///
/// Catches a reserve that reads the window's count and writes count + 1 without a condition
/// under the row's lock (both are admitted).
pub async fn quota_race(rig: &dyn RaceRig) -> CaseResult {
    let clock = ManualClock::at_contract_epoch();
    let pair = rig.open(options(&clock)).await?;
    let config = QuotaConfig { limit: 1, period: Duration::from_secs(3600), key: "k".into() };
    let gate = |broker: Arc<dyn Broker>| {
        let provider = broker.quota_provider().map(|p| p.queue_quota("race", &config));
        match provider {
            Some(Ok(gate)) => gate,
            Some(Err(e)) => panic!("queue_quota: {e}"),
            None => panic!("the backend has no quota provider"),
        }
    };
    let (ga, gb) = (gate(pair.a()), gate(pair.b()));
    let mut held = hold_a(&*pair, "quota_reserve");
    let a_call = spawn(async move { ga.reserve().await });
    held.entered().await;
    let b_call = spawn(async move { gb.reserve().await });
    let seen = watch(&*pair, &b_call, "B's reserve").await;
    held.release();
    let a_got = joined(a_call, "A's reserve").await?;
    let b_got = joined(b_call, "B's reserve").await?;
    pair.set_a_hook(None);
    assert!(a_got.is_some(), "A's reserve of the one unit");
    assert!(b_got.is_none(), "B was admitted too: two starts in a window of one");
    assert_ne!(seen, Seen::Finished, "B's reserve returned while A held the window's row");
    pair.finish().await
}

/// Rows the foreign writer locks besides the parent, so that it is the larger transaction of the
/// deadlock (a server that picks the smaller one as the victim picks B's).
const BALLAST: usize = 20;

/// Given parents pa and pb, and another writer's transaction holding pb's row (and
/// twenty other rows), when B enqueues a child of [pa, pb] — locking pa, then waiting for
/// pb — and the other writer then asks for pa, then the database reports a deadlock, B's
/// transaction is its victim (the other writer gets pa), B's enqueue is retried and waits again
/// until the other writer rolls back, and B's caller gets the stored child (`blocked`), never
/// the deadlock.
///
/// Catches a backend that does not classify its database's deadlock error as retryable (the
/// caller sees it) or that retries without rolling back first. Backends whose writers cannot
/// deadlock ([`RacePair::foreign_writer`] is `None`) pass by construction.
pub async fn deadlock_race(rig: &dyn RaceRig) -> CaseResult {
    let clock = ManualClock::at_contract_epoch();
    let pair = rig.open(options(&clock)).await?;
    let Some(writer) = pair.foreign_writer().await else {
        eprintln!(
            "race_deadlock: {} has one writer at a time; no deadlock is possible",
            pair.a().backend()
        );
        return pair.finish().await;
    };
    let mut writer = writer?;
    let a = pair.a();
    a.enqueue(&Task::new("job", "race").with_id("pa")).await?;
    a.enqueue(&Task::new("job", "race").with_id("pb")).await?;
    for i in 0..BALLAST {
        a.enqueue(&Task::new("job", "ballast").with_id(format!("ballast-{i:02}"))).await?;
    }
    for i in 0..BALLAST {
        writer.lock(&format!("ballast-{i:02}")).await?;
    }
    writer.lock("pb").await?;
    let b = pair.b();
    let child = Task::new("job", "race").with_id("c").with_depends_on(["pa", "pb"]);
    let b_call = spawn(async move { b.enqueue(&child).await });
    match watch(&*pair, &b_call, "B's enqueue of a child of pa and pb").await {
        Seen::Waited => {}
        seen => panic!("B's enqueue did not wait for pb, which the other writer holds: {seen:?}"),
    }
    // Asking for pa closes the cycle: B holds pa and waits for pb, the writer holds pb.
    if let Err(e) = within(WAIT_LIMIT, "the other writer's lock of pa", writer.lock("pa")).await {
        panic!("the other writer lost the deadlock (or its lock of pa failed); B's was to be the victim: {e}");
    }
    assert!(!b_call.is_finished(), "B's retried enqueue waits for pa until the writer ends");
    writer.rollback().await?;
    let stored = joined(b_call, "B's retried enqueue").await;
    match stored {
        Ok(t) => assert_eq!((t.id.as_str(), t.status), ("c", Status::Blocked), "B's stored child"),
        Err(e) => panic!("the deadlock reached B's caller: {e} ({:?})", e.kind()),
    }
    assert_eq!(pair.a().get("c").await?.depends_on, ["pa", "pb"], "the child is stored once");
    pair.finish().await
}

/// What handle B saw of one task at one of A's commit points: the task's status and how many
/// audit records name it.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AuditView {
    /// The hook's name for A's transaction (`audited`, …).
    op: String,
    /// The task's status.
    status: Status,
    /// Audit records whose target is the task.
    records: usize,
}

/// B's view of task `id` and its records, read while A's hook runs (the hook is synchronous:
/// the read blocks the hook's thread through `block_in_place`).
fn view_now(b: &Arc<dyn Broker>, op: &str, id: &str) -> Result<AuditView, String> {
    let read = async {
        let status = b.get(id).await.map_err(|e| format!("B's get({id}): {e}"))?.status;
        let query = AuditQuery { target: format!("task:{id}"), ..AuditQuery::default() };
        let records =
            b.audit_log(&query).await.map_err(|e| format!("B's audit_log({id}): {e}"))?.len();
        Ok(AuditView { op: op.to_owned(), status, records })
    };
    tokio::task::block_in_place(|| tokio::runtime::Handle::current().block_on(read))
}

/// A view is whole when the cancel and its record are both there or both not.
fn assert_whole(view: &AuditView, when: &str) {
    let cancelled = view.status == Status::Canceled;
    assert!(
        (cancelled && view.records == 1) || (view.status == Status::Pending && view.records == 0),
        "{when} (A's `{}` transaction), B saw the task {:?} with {} audit record(s): the action \
         and its record did not commit together",
        view.op,
        view.status,
        view.records
    );
}

/// Given pending tasks, operator `alice` cancels one through handle A's
/// [`Broker::audited`] while A's hook runs at every commit point of the call (before each
/// commit on a SQL backend; at the end of each critical section in memory):
///
/// 1. at each point handle B reads the task and its audit records: it sees the task pending
///    with no record, or canceled with its one record — never one without the other; after the
///    call both are there;
/// 2. then, for every point k the first call reached, a fresh task's audited cancel is failed
///    on purpose at point k (the hook panics: a crash after the action's statements, before
///    its commit): afterwards the task is pending with no record, or canceled with its one
///    record, and a call that did not commit did not report success.
///
/// Catches a record written in its own transaction after the action commits (B sees the
/// cancel without its record; a failure at the second point leaves it so), or before it (the
/// record without the cancel).
pub async fn audit_atomic_race(rig: &dyn RaceRig) -> CaseResult {
    let clock = ManualClock::at_contract_epoch();
    let pair = rig.open(options(&clock)).await?;
    let (a, b) = (pair.a(), pair.b());
    if !a.capabilities().audit {
        eprintln!("race_audit: {} has no audit log; nothing to prove", a.backend());
        return pair.finish().await;
    }
    let cancel = |id: &str| AdminAction::Cancel { id: id.to_owned() };

    // 1. B's view at each of A's commit points.
    a.enqueue(&Task::new("job", "race").with_id("v")).await?;
    let views: Arc<Mutex<Vec<Result<AuditView, String>>>> = Arc::default();
    let (seen, reader) = (views.clone(), b.clone());
    pair.set_a_hook(Some(Arc::new(move |op: &str| {
        let view = view_now(&reader, op, "v");
        seen.lock().unwrap_or_else(PoisonError::into_inner).push(view);
    })));
    let a_call = a.clone();
    let done =
        joined(spawn(async move { a_call.audited("alice", &cancel("v")).await }), "A's cancel")
            .await;
    pair.set_a_hook(None);
    assert!(done.is_ok(), "A's audited cancel of v: {done:?}");
    let views = std::mem::take(&mut *views.lock().unwrap_or_else(PoisonError::into_inner));
    assert!(!views.is_empty(), "A's audited cancel reached no commit point: the hook never ran");
    for view in &views {
        match view {
            Ok(view) => assert_whole(view, "at a commit point of the audited cancel of v"),
            Err(e) => panic!("B could not read at A's commit point: {e}"),
        }
    }
    let after = view_now(&b, "after", "v")?;
    assert_eq!(
        (after.status, after.records),
        (Status::Canceled, 1),
        "after the audited cancel of v"
    );

    // 2. A failure forced at each commit point the call reached.
    for k in 1..=views.len() {
        let id = format!("f{k}");
        a.enqueue(&Task::new("job", "race").with_id(&id)).await?;
        let points = Arc::new(AtomicUsize::new(0));
        let counter = points.clone();
        pair.set_a_hook(Some(Arc::new(move |op: &str| {
            if counter.fetch_add(1, Ordering::SeqCst) + 1 == k {
                panic!("race_audit: a failure forced at A's commit point {k} (`{op}`)");
            }
        })));
        let (a_call, action) = (a.clone(), cancel(&id));
        let call = within(
            WAIT_LIMIT,
            "A's failed cancel",
            spawn(async move { a_call.audited("alice", &action).await }),
        )
        .await;
        pair.set_a_hook(None);
        assert!(points.load(Ordering::SeqCst) >= k, "the cancel of {id} did not reach point {k}");
        let view = view_now(&b, "after the forced failure", &id)?;
        assert_whole(&view, &format!("after a failure forced at commit point {k}"));
        if let Ok(Ok(_)) = call {
            assert_eq!(view.status, Status::Canceled, "a cancel reported done did not commit");
        }
    }
    pair.finish().await
}

/// The body of one test [`race_tests!`](crate::race_tests) makes: runs `race` within
/// [`TEST_LIMIT`]; an unavailable backend skips loudly (or fails, with
/// `TASKGATE_REQUIRE_DB=1`).
#[doc(hidden)]
pub async fn run_race(
    name: &str,
    race: impl std::future::Future<Output = CaseResult>,
) -> CaseResult {
    crate::or_skip(name, within(TEST_LIMIT, name, race).await).map(drop)
}

#[doc(hidden)]
#[macro_export]
macro_rules! __race_test_fns {
    ($rig:expr; $($name:ident => $driver:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $name() -> $crate::CaseResult {
                let rig = $rig;
                $crate::races::run_race(stringify!($name), $crate::races::$driver(&rig)).await
            }
        )*
    };
}

/// Expands to one `#[tokio::test]` per race of [`races`](crate::races) against `$rig` (a
/// [`RaceRig`] expression evaluated afresh in every test): `race_claim`,
/// `race_writers_pass_claim`, `race_reap_ack`, `race_ack_reap`, `race_identity`, `race_quota`,
/// `race_deadlock`, `race_audit`. The calling crate depends on `tokio` with
/// `macros` and `rt-multi-thread`.
#[macro_export]
macro_rules! race_tests {
    ($rig:expr) => {
        $crate::__race_test_fns! { $rig;
            race_claim => claim_race,
            race_writers_pass_claim => writers_pass_held_claim,
            race_reap_ack => reap_during_held_ack,
            race_ack_reap => ack_during_held_reap,
            race_identity => identity_race,
            race_quota => quota_race,
            race_deadlock => deadlock_race,
            race_audit => audit_atomic_race,
        }
    };
}
