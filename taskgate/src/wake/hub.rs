//! The in-process signal: wake every waiting claimer, or as many as new work needs.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{watch, Notify};

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
    pub(super) all: bool,
    pub(super) ready: Vec<(String, usize)>,
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
