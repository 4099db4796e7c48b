//! Waking blocked claimers: the in-process signal every backend raises after a write, and the
//! one waiting loop every backend's `dequeue` runs (contract §3.4 "Dequeue", extensions §E2).

use std::future::Future;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{watch, Notify};

use crate::{Clock, Error, Result, Task};

/// Wakes blocked claimers: every one at once ([`WakeHub::wake`]) or, for tasks made ready on
/// one queue, only as many as can take them ([`WakeHub::wake_ready`]).
///
/// Claimers take a [`WakeListener`] *before* they look for work, so a write that lands between
/// "found nothing" and "start waiting" is never missed (notes §15.8).
///
/// A counted wake (`k` tasks ready on queue `q`) wakes the longest-waiting listeners on `q`
/// until their batch sizes cover `k`; the others sleep on. None is left asleep past work it
/// could take: a woken listener that leaves without looking again (its claim returned other
/// work, its call was dropped, its look failed) passes the wake on to the next listener on
/// that queue, and a claimer that comes back finds the work on its first look.
#[derive(Debug)]
pub struct WakeHub {
    tx: watch::Sender<u64>,
    shared: Arc<Shared>,
}

#[derive(Debug, Default)]
struct Shared {
    waiters: Mutex<Vec<Arc<Waiter>>>,
    next: AtomicU64,
}

/// One registered listener of counted wakes.
#[derive(Debug)]
struct Waiter {
    id: u64,
    queues: Vec<String>,
    batch: usize,
    notify: Notify,
    /// The queue (index into `queues`) a counted wake named, until the listener looks again.
    woken: AtomicUsize,
}

const NOT_WOKEN: usize = usize::MAX;

impl Shared {
    fn waiters(&self) -> std::sync::MutexGuard<'_, Vec<Arc<Waiter>>> {
        // Pushes and removals only: a poisoned list is still consistent.
        self.waiters.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn wake_ready(&self, queue: &str, ready: usize, skip: u64) {
        if ready == 0 {
            return;
        }
        let mut covered = 0usize;
        for w in self.waiters().iter() {
            if w.id == skip {
                continue;
            }
            let Some(i) = w.queues.iter().position(|q| q == queue) else { continue };
            // Only a fresh wake counts: a listener woken earlier may be taking that work.
            if w.woken.compare_exchange(NOT_WOKEN, i, Ordering::AcqRel, Ordering::Acquire).is_ok() {
                w.notify.notify_one();
                covered = covered.saturating_add(w.batch.max(1));
                if covered >= ready {
                    return;
                }
            }
        }
    }
}

impl WakeHub {
    /// A new hub.
    pub fn new() -> Self {
        WakeHub { tx: watch::Sender::new(0), shared: Arc::default() }
    }

    /// Wakes every current listener.
    pub fn wake(&self) {
        self.tx.send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    /// `ready` tasks became claimable on `queue`: wakes the longest-waiting listeners that
    /// watch `queue` until their batch sizes cover `ready` (listeners made with
    /// [`WakeHub::listener`] only hear [`WakeHub::wake`]).
    pub fn wake_ready(&self, queue: &str, ready: usize) {
        self.shared.wake_ready(queue, ready, u64::MAX);
    }

    /// Wakes what a committed write made claimable.
    pub fn wake_for(&self, wakes: &Wakes) {
        if wakes.all {
            self.wake();
            return;
        }
        for (queue, ready) in &wakes.ready {
            self.wake_ready(queue, *ready);
        }
    }

    /// A listener that fires on the next [`WakeHub::wake`] after this call.
    pub fn listener(&self) -> WakeListener {
        let mut rx = self.tx.subscribe();
        rx.borrow_and_update();
        WakeListener { rx, counted: None }
    }

    /// A listener that fires on the next [`WakeHub::wake`], or on a [`WakeHub::wake_ready`]
    /// of one of `queues` that picks it, after this call; `batch` is how many tasks its
    /// claimer takes at once.
    pub fn listener_for(&self, queues: &[String], batch: usize) -> WakeListener {
        let mut listener = self.listener();
        let waiter = Arc::new(Waiter {
            id: self.shared.next.fetch_add(1, Ordering::Relaxed),
            queues: queues.to_vec(),
            batch,
            notify: Notify::new(),
            woken: AtomicUsize::new(NOT_WOKEN),
        });
        self.shared.waiters().push(waiter.clone());
        listener.counted = Some((self.shared.clone(), waiter));
        listener
    }
}

impl Default for WakeHub {
    fn default() -> Self {
        WakeHub::new()
    }
}

/// What a committed write made claimable: the waiters to wake after its commit.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Wakes {
    all: bool,
    ready: Vec<(String, usize)>,
}

impl Wakes {
    /// Wake every waiter (work whose queue or amount is not counted: a woken child, a
    /// resumed queue, a requeue).
    pub fn all(&mut self) {
        self.all = true;
        self.ready.clear();
    }

    /// One more task ready on `queue`.
    pub fn ready(&mut self, queue: &str) {
        if self.all {
            return;
        }
        match self.ready.iter_mut().find(|(q, _)| q == queue) {
            Some((_, n)) => *n += 1,
            None => self.ready.push((queue.to_owned(), 1)),
        }
    }

    /// True when some waiter is to be woken.
    pub fn any(&self) -> bool {
        self.all || !self.ready.is_empty()
    }
}

/// Waits for the next wake of a [`WakeHub`].
#[derive(Debug)]
pub struct WakeListener {
    rx: watch::Receiver<u64>,
    counted: Option<(Arc<Shared>, Arc<Waiter>)>,
}

impl WakeListener {
    /// Completes on the next wake (at once if one happened since the listener was made).
    pub async fn changed(&mut self) {
        let (rx, counted) = (&mut self.rx, &self.counted);
        let counted = async move {
            match counted {
                Some((_, w)) => w.notify.notified().await,
                None => futures::future::pending().await,
            }
        };
        tokio::pin!(counted);
        tokio::select! {
            r = rx.changed() => {
                if r.is_err() {
                    // The hub is gone; only a counted wake can still come.
                    counted.as_mut().await;
                }
            }
            () = counted.as_mut() => {}
        }
    }

    /// The claimer is about to look again: a counted wake received so far is taken up.
    pub fn looking(&self) {
        if let Some((_, w)) = &self.counted {
            w.woken.store(NOT_WOKEN, Ordering::Release);
        }
    }
}

impl Drop for WakeListener {
    fn drop(&mut self) {
        let Some((shared, w)) = self.counted.take() else { return };
        shared.waiters().retain(|x| x.id != w.id);
        // Woken but leaving without looking: the work is someone else's to take.
        let i = w.woken.swap(NOT_WOKEN, Ordering::AcqRel);
        if let Some(queue) = w.queues.get(i) {
            shared.wake_ready(queue, w.batch.max(1), w.id);
        }
    }
}

/// One look for ready work by a waiting claimer.
///
/// Non-exhaustive: a later answer (as [`Probe::Held`] was) is not a breaking change for a
/// backend that matches on it.
#[derive(Debug)]
#[non_exhaustive]
pub enum Probe {
    /// Tasks were claimed (never empty).
    Claimed(Vec<Task>),
    /// Nothing ready; the earliest delayed task among the watched queues is due after this
    /// long (on the clock the loop waits on), if there is one.
    Idle {
        /// Time until the next due task.
        next_due_in: Option<Duration>,
    },
    /// Work was seen but the claim got none of it while other claims of the same handle
    /// were in flight: they hold those rows and will take them (a claim that fails instead
    /// must wake the waiters). The claimer waits as if idle, looking once more after
    /// [`HELD_RELOOK`] at the latest, instead of re-looking within milliseconds.
    Held,
}

/// What a waiting claimer claims: the queues it watches and how many tasks it takes at once
/// (for [`WakeHub::wake_ready`]). No queues: it hears only [`WakeHub::wake`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Interest<'a> {
    /// The queues it claims from.
    pub queues: &'a [String],
    /// The most tasks one claim takes.
    pub batch: usize,
}

/// Why a waiting claimer looks for work (the argument of [`wait_for_work`]'s probe).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Look {
    /// The first look of a `dequeue` call.
    First,
    /// A write of this process (or, where the backend listens, of another) made work
    /// claimable since the last look: claiming straight away is likely to succeed.
    Woken,
    /// A due time or the poll interval passed.
    Timer,
}

/// Looks again after a look saw ready work but claimed none of it (rows held by other
/// claimers): after 1, 2, 4 … 128 ms of real time; then the claimer waits as usual.
const CONTENDED_RELOOKS: u32 = 8;

/// The latest a [`Probe::Held`] look is followed by another when no wake-up comes first:
/// the last step of the contended re-looks. It bounds the wait for rows left ready with no
/// wake-up: rows InnoDB locked while a claim examined them and did not take, or rows another
/// process's claim held while this handle's claims were also under way.
pub const HELD_RELOOK: Duration = Duration::from_millis(1 << (CONTENDED_RELOOKS - 1));

/// The waiting loop of `dequeue`: probe, and while nothing is ready wait for the first of an
/// in-process wake (every wake, and the counted wakes of `interest`'s queues that pick this
/// claimer), the next due time on `clock`, a real-time `poll` (other processes' writes),
/// or the broker closing (then `Closed`); a look that saw ready work but claimed none of it
/// (other claimers held the rows) is followed by another within a few milliseconds, backing
/// off to the usual wait after about a quarter of a second, except where the probe knows the
/// holders are claims of its own handle ([`Probe::Held`]): then the claimer waits for a
/// wake-up, looking once more after [`HELD_RELOOK`] at the latest. The probe should itself check
/// the lifecycle; it is told why it looks ([`Look`]), so a backend may claim at once after a
/// wake-up instead of looking first.
pub async fn wait_for_work<F, Fut>(
    hub: &WakeHub,
    interest: Interest<'_>,
    life: &Lifecycle,
    clock: &dyn Clock,
    poll: Option<Duration>,
    mut probe: F,
) -> Result<Vec<Task>>
where
    F: FnMut(Look) -> Fut + Send,
    Fut: Future<Output = Result<Probe>> + Send,
{
    let mut closed = life.closed_tx.subscribe();
    let mut look = Look::First;
    let mut relooks = 0u32;
    loop {
        if *closed.borrow_and_update() {
            return Err(Error::Closed);
        }
        let listener = match interest.queues {
            [] => hub.listener(),
            queues => hub.listener_for(queues, interest.batch),
        };
        let (mut contended, mut held) = (false, false);
        let next_due_in = match probe(look).await {
            Ok(Probe::Claimed(tasks)) if !tasks.is_empty() => return Ok(tasks),
            // Work was seen but the claim got none of it: other claimers' transactions held
            // those rows (SKIP LOCKED). They may yet leave some unclaimed, and no wake-up
            // comes for rows that were ready all along, so look again soon.
            Ok(Probe::Claimed(_)) => {
                contended = true;
                None
            }
            // The holders are this handle's own claims in flight: they take the rows or
            // wake the waiters, so a wake-up (or the one late re-look) is enough.
            Ok(Probe::Held) => {
                held = true;
                None
            }
            Ok(Probe::Idle { next_due_in }) => next_due_in,
            // A probe cut short by `close` (its pool closed under it) is the close, not a
            // storage failure: the caller gets `Closed`, as a waiter between probes does.
            Err(_) if *closed.borrow() => return Err(Error::Closed),
            Err(e) => return Err(e),
        };
        let due = async {
            match next_due_in {
                Some(d) => clock.sleep(d).await,
                None => futures::future::pending().await,
            }
        };
        let retry = match contended {
            true => {
                relooks += 1;
                (relooks <= CONTENDED_RELOOKS).then(|| Duration::from_millis(1 << (relooks - 1)))
            }
            false => {
                relooks = 0;
                held.then_some(HELD_RELOOK)
            }
        };
        let polled = async {
            match [retry, poll].into_iter().flatten().min() {
                Some(p) => tokio::time::sleep(p).await,
                None => futures::future::pending().await,
            }
        };
        let mut listener = listener;
        look = tokio::select! {
            () = listener.changed() => Look::Woken,
            () = due => Look::Timer,
            () = polled => Look::Timer,
            _ = closed.changed() => Look::Timer,
        };
        // Every way out of the wait looks again: a counted wake is taken up, not passed on.
        listener.looking();
    }
}

/// A broker handle's lifecycle: not initialised, ready with resolved options, or closed.
/// Closing it ends every [`wait_for_work`] loop that runs under it.
#[derive(Debug)]
pub struct Lifecycle {
    state: std::sync::RwLock<LifeState>,
    closed_tx: watch::Sender<bool>,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Lifecycle { state: std::sync::RwLock::default(), closed_tx: watch::Sender::new(false) }
    }
}

#[derive(Debug, Default)]
enum LifeState {
    #[default]
    New,
    Ready(std::sync::Arc<crate::ResolvedOptions>),
    Closed,
}

impl Lifecycle {
    /// A lifecycle in the "not initialised" state.
    pub fn new() -> Self {
        Lifecycle::default()
    }

    /// Installs (or refreshes) the options; fails with `Closed` after close.
    pub fn init(&self, options: crate::ResolvedOptions) -> Result<()> {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        if matches!(*state, LifeState::Closed) {
            return Err(Error::Closed);
        }
        *state = LifeState::Ready(std::sync::Arc::new(options));
        Ok(())
    }

    /// The options, or `NotInitialized` / `Closed`.
    pub fn options(&self) -> Result<std::sync::Arc<crate::ResolvedOptions>> {
        match &*self.state.read().unwrap_or_else(|p| p.into_inner()) {
            LifeState::New => Err(Error::NotInitialized),
            LifeState::Ready(options) => Ok(options.clone()),
            LifeState::Closed => Err(Error::Closed),
        }
    }

    /// Moves to closed and wakes waiting loops; returns false when it already was closed.
    pub fn close(&self) -> bool {
        let mut state = self.state.write().unwrap_or_else(|p| p.into_inner());
        let was_open =
            !matches!(std::mem::replace(&mut *state, LifeState::Closed), LifeState::Closed);
        drop(state);
        self.closed_tx.send_replace(true);
        was_open
    }

    /// True after [`Lifecycle::close`].
    pub fn is_closed(&self) -> bool {
        *self.closed_tx.borrow()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ManualClock;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    #[tokio::test]
    async fn wake_between_probe_and_wait_is_not_missed() {
        let hub = Arc::new(WakeHub::new());
        let life = Lifecycle::new();
        let clock = ManualClock::at_contract_epoch();
        let probes = AtomicUsize::new(0);
        let looks = std::sync::Mutex::new(Vec::new());
        let got = wait_for_work(&hub, Interest::default(), &life, &clock, None, |look| {
            looks.lock().unwrap().push(look);
            let n = probes.fetch_add(1, Ordering::SeqCst);
            let hub = hub.clone();
            async move {
                if n == 0 {
                    hub.wake(); // a write lands right after the probe found nothing
                    Ok(Probe::Idle { next_due_in: None })
                } else {
                    Ok(Probe::Claimed(vec![Task::new("t", "q")]))
                }
            }
        })
        .await;
        assert_eq!(got.map(|t| t.len()).ok(), Some(1));
        assert_eq!(*looks.lock().unwrap(), vec![Look::First, Look::Woken]);
    }

    #[tokio::test]
    async fn close_ends_the_wait() {
        let hub = WakeHub::new();
        let life = Arc::new(Lifecycle::new());
        let clock = ManualClock::at_contract_epoch();
        let closer = life.clone();
        let waiter = async {
            wait_for_work(&hub, Interest::default(), &life, &clock, None, |_| async {
                Ok(Probe::Idle { next_due_in: None })
            })
            .await
        };
        let (res, ()) = tokio::join!(waiter, async move {
            tokio::task::yield_now().await;
            closer.close();
        });
        assert_eq!(res.err().map(|e| e.kind()), Some(crate::ErrorKind::Closed));
    }

    #[tokio::test]
    async fn a_probe_failing_because_of_close_is_closed_not_backend() {
        let hub = WakeHub::new();
        let life = Lifecycle::new();
        let clock = ManualClock::at_contract_epoch();
        let res = wait_for_work(&hub, Interest::default(), &life, &clock, None, |_| async {
            life.close(); // the pool closes under the probe
            Err(Error::backend("test", "pool closed"))
        })
        .await;
        assert_eq!(res.err().map(|e| e.kind()), Some(crate::ErrorKind::Closed));
        let open = Lifecycle::new();
        let res = wait_for_work(&hub, Interest::default(), &open, &clock, None, |_| async {
            Err(Error::backend("test", "disk full"))
        })
        .await;
        assert_eq!(res.err().map(|e| e.kind()), Some(crate::ErrorKind::Backend));
    }

    fn q(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    /// True when the listener has a wake pending (polls it once).
    fn fired(l: &mut WakeListener) -> bool {
        use futures::FutureExt;
        l.changed().now_or_never().is_some()
    }

    #[tokio::test]
    async fn a_counted_wake_wakes_as_many_as_the_work_needs_oldest_first() {
        let hub = WakeHub::new();
        let (work, other) = (q(&["work"]), q(&["other", "work"]));
        let mut a = hub.listener_for(&work, 100);
        let mut b = hub.listener_for(&other, 100);
        let mut c = hub.listener_for(&work, 100);
        let mut d = hub.listener_for(&q(&["other"]), 100);
        hub.wake_ready("work", 100);
        assert_eq!(
            [fired(&mut a), fired(&mut b), fired(&mut c), fired(&mut d)],
            [true, false, false, false]
        );
        a.looking();
        hub.wake_ready("work", 101);
        assert_eq!([fired(&mut a), fired(&mut b), fired(&mut c)], [true, true, false]);
        a.looking();
        b.looking();
        hub.wake_ready("work", 1_000);
        assert!(fired(&mut a) && fired(&mut b) && fired(&mut c), "all three, not more than exist");
        assert!(!fired(&mut d), "another queue's waiter sleeps on");
        hub.wake();
        assert!(fired(&mut d), "a wake of all reaches every listener");
    }

    #[test]
    fn wakes_count_the_tasks_a_commit_made_ready_per_queue() {
        let mut wakes = Wakes::default();
        assert!(!wakes.any(), "nothing ready wakes nobody");
        for queue in ["mail", "mail", "sms", "mail"] {
            wakes.ready(queue);
        }
        assert!(wakes.any());
        assert_eq!(wakes.ready, vec![("mail".to_owned(), 3), ("sms".to_owned(), 1)]);
        wakes.all();
        assert!(wakes.any() && wakes.all && wakes.ready.is_empty(), "all replaces the counts");
        wakes.ready("mail");
        assert!(wakes.ready.is_empty(), "after all, a count adds nothing");
    }

    #[tokio::test]
    async fn n_tasks_in_one_commit_wake_waiters_for_n_and_no_more() {
        let hub = WakeHub::new();
        let work = q(&["work"]);
        let mut listeners: Vec<WakeListener> = (0..5).map(|_| hub.listener_for(&work, 1)).collect();
        let mut other = hub.listener_for(&q(&["other"]), 1);
        let mut wakes = Wakes::default();
        for _ in 0..3 {
            wakes.ready("work");
        }
        hub.wake_for(&wakes);
        let woke: Vec<bool> = listeners.iter_mut().map(fired).collect();
        assert_eq!(
            woke,
            [true, true, true, false, false],
            "three tasks, three batch-1 waiters, oldest first"
        );
        assert!(!fired(&mut other), "another queue's waiter sleeps on");

        // Batch sizes count: one waiter taking 2 covers two of the tasks.
        let hub = WakeHub::new();
        let mut big = hub.listener_for(&work, 2);
        let mut small = hub.listener_for(&work, 1);
        let mut last = hub.listener_for(&work, 1);
        hub.wake_for(&wakes);
        assert_eq!([fired(&mut big), fired(&mut small), fired(&mut last)], [true, true, false]);

        // A commit of uncounted work wakes everyone.
        let mut all = Wakes::default();
        all.all();
        hub.wake_for(&all);
        assert!(fired(&mut last), "all reaches the waiter the counted wake left asleep");
    }

    #[tokio::test]
    async fn a_woken_listener_that_leaves_without_looking_passes_the_wake_on() {
        let hub = WakeHub::new();
        let work = q(&["work"]);
        let a = hub.listener_for(&work, 10);
        let mut b = hub.listener_for(&work, 10);
        hub.wake_ready("work", 5);
        assert!(!fired(&mut b));
        drop(a); // its claim returned other work, or its call was dropped
        assert!(fired(&mut b), "the next listener on the queue got the wake");
        b.looking();
        let mut c = hub.listener_for(&work, 10);
        drop(b); // took the wake up before leaving: nothing to pass on
        assert!(!fired(&mut c));
    }

    #[tokio::test]
    async fn a_counted_wake_with_nobody_waiting_is_seen_by_the_next_look() {
        let hub = Arc::new(WakeHub::new());
        let life = Lifecycle::new();
        let clock = ManualClock::at_contract_epoch();
        let work = q(&["work"]);
        let ready = Arc::new(AtomicUsize::new(0));
        // Work committed (and its wake sent) before anyone waits.
        ready.store(1, Ordering::SeqCst);
        hub.wake_ready("work", 1);
        let interest = Interest { queues: &work, batch: 1 };
        let got = wait_for_work(&hub, interest, &life, &clock, None, |_| {
            let ready = ready.clone();
            async move {
                match ready.swap(0, Ordering::SeqCst) {
                    0 => Ok(Probe::Idle { next_due_in: None }),
                    _ => Ok(Probe::Claimed(vec![Task::new("t", "work")])),
                }
            }
        })
        .await;
        assert_eq!(got.map(|t| t.len()).ok(), Some(1));
    }

    #[tokio::test]
    async fn one_counted_wake_of_one_task_wakes_one_of_two_waiters() {
        let hub = Arc::new(WakeHub::new());
        let life = Arc::new(Lifecycle::new());
        let clock = Arc::new(ManualClock::at_contract_epoch());
        let work = Arc::new(q(&["work"]));
        let ready = Arc::new(AtomicUsize::new(0));
        let probes = Arc::new(AtomicUsize::new(0));
        let waiter = |hub: Arc<WakeHub>| {
            let (life, clock, work) = (life.clone(), clock.clone(), work.clone());
            let (ready, probes) = (ready.clone(), probes.clone());
            tokio::spawn(async move {
                let interest = Interest { queues: &work, batch: 1 };
                wait_for_work(&hub, interest, &life, &*clock, None, |_| {
                    probes.fetch_add(1, Ordering::SeqCst);
                    let took = ready
                        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                        .is_ok();
                    async move {
                        match took {
                            true => Ok(Probe::Claimed(vec![Task::new("t", "work")])),
                            false => Ok(Probe::Idle { next_due_in: None }),
                        }
                    }
                })
                .await
            })
        };
        let (x, y) = (waiter(hub.clone()), waiter(hub.clone()));
        while probes.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
        ready.store(1, Ordering::SeqCst);
        hub.wake_ready("work", 1);
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert_eq!(probes.load(Ordering::SeqCst), 3, "one waiter looked again, not both");
        assert_eq!(u8::from(x.is_finished()) + u8::from(y.is_finished()), 1);
        life.close();
        let _ = (x.await, y.await);
    }

    /// A probe that answers `early()` to its first `n` looks and claims one task after.
    fn claims_after(
        probes: &AtomicUsize,
        n: usize,
        early: fn() -> Probe,
    ) -> impl FnMut(Look) -> futures::future::Ready<Result<Probe>> + Send + '_ {
        move |_| {
            let k = probes.fetch_add(1, Ordering::SeqCst);
            let answer = if k < n { early() } else { Probe::Claimed(vec![Task::new("t", "q")]) };
            futures::future::ready(Ok(answer))
        }
    }

    // Paused time (here and in the re-look tests below): the runtime's clock jumps to the
    // next timer when nothing else can run, so a slow machine cannot reorder the timers.
    #[tokio::test(start_paused = true)]
    async fn a_held_look_waits_for_a_wake_up_instead_of_re_looking_soon() {
        let hub = WakeHub::new();
        let life = Lifecycle::new();
        let clock = ManualClock::at_contract_epoch();
        let probes = AtomicUsize::new(0);
        let queues = ["work".to_owned()];
        let interest = Interest { queues: &queues, batch: 1 };
        // The first look: rows held by this handle's own claims in flight.
        let probe = claims_after(&probes, 1, || Probe::Held);
        let waiting = wait_for_work(&hub, interest, &life, &clock, None, probe);
        tokio::pin!(waiting);
        // A contended look would have looked again 6 times by now (1 + 2 + … + 32 ms).
        let early = tokio::time::timeout(Duration::from_millis(80), waiting.as_mut()).await;
        assert!(early.is_err(), "a held look waits");
        assert_eq!(probes.load(Ordering::SeqCst), 1, "no look within 80 ms");
        hub.wake_ready("work", 1);
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        assert_eq!(got.ok().and_then(|r| r.ok()).map(|t| t.len()), Some(1));
        assert_eq!(probes.load(Ordering::SeqCst), 2);
    }

    /// Waits with no wake-up, no poll and a clock that never moves, so only re-looks can
    /// find the task `claims_after(n, early)` hands out: the tasks got and the looks taken.
    async fn relooks_alone(n: usize, early: fn() -> Probe) -> (Option<usize>, usize) {
        let (hub, life) = (WakeHub::new(), Lifecycle::new());
        let clock = ManualClock::at_contract_epoch();
        let probes = AtomicUsize::new(0);
        let interest = Interest::default();
        let probe = claims_after(&probes, n, early);
        let waiting = wait_for_work(&hub, interest, &life, &clock, None, probe);
        let got = tokio::time::timeout(Duration::from_secs(5), waiting).await;
        (got.ok().and_then(|r| r.ok()).map(|t| t.len()), probes.load(Ordering::SeqCst))
    }

    #[tokio::test(start_paused = true)]
    async fn a_held_look_with_no_wake_up_looks_once_more_after_the_held_relook() {
        let started = tokio::time::Instant::now();
        assert_eq!(relooks_alone(1, || Probe::Held).await, (Some(1), 2));
        assert!(started.elapsed() >= HELD_RELOOK, "the second look came after HELD_RELOOK");
    }

    #[tokio::test(start_paused = true)]
    async fn a_look_that_saw_work_but_claimed_none_looks_again_soon() {
        // Three looks see work held by other claimers (claimed none of it).
        assert_eq!(relooks_alone(3, || Probe::Claimed(Vec::new())).await, (Some(1), 4));
    }

    #[test]
    fn lifecycle_states() {
        let life = Lifecycle::new();
        assert_eq!(life.options().err().map(|e| e.kind()), Some(crate::ErrorKind::NotInitialized));
        assert!(life.init(crate::ResolvedOptions::default()).is_ok());
        assert!(life.options().is_ok());
        assert!(life.close());
        assert!(!life.close());
        assert_eq!(life.options().err().map(|e| e.kind()), Some(crate::ErrorKind::Closed));
    }
}
