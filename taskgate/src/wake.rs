//! Waking blocked claimers: the in-process signal every backend raises after a write, and the
//! one waiting loop every backend's `dequeue` runs (contract §3.4 "Dequeue", extensions §E2).

use std::future::Future;
use std::time::Duration;

use tokio::sync::watch;

use crate::{Clock, Error, Result, Task};

/// A generation counter that in-process writes bump and claimers wait on.
///
/// Claimers take a [`WakeListener`] *before* they look for work, so a write that lands between
/// "found nothing" and "start waiting" is never missed (notes §15.8).
#[derive(Debug)]
pub struct WakeHub {
    tx: watch::Sender<u64>,
}

impl WakeHub {
    /// A new hub.
    pub fn new() -> Self {
        WakeHub { tx: watch::Sender::new(0) }
    }

    /// Wakes every current listener.
    pub fn wake(&self) {
        self.tx.send_modify(|generation| *generation = generation.wrapping_add(1));
    }

    /// A listener that fires on the next [`WakeHub::wake`] after this call.
    pub fn listener(&self) -> WakeListener {
        let mut rx = self.tx.subscribe();
        rx.borrow_and_update();
        WakeListener { rx }
    }
}

impl Default for WakeHub {
    fn default() -> Self {
        WakeHub::new()
    }
}

/// Waits for the next wake of a [`WakeHub`].
#[derive(Debug)]
pub struct WakeListener {
    rx: watch::Receiver<u64>,
}

impl WakeListener {
    /// Completes on the next wake (at once if one happened since the listener was made).
    pub async fn changed(&mut self) {
        if self.rx.changed().await.is_err() {
            // The hub is gone; nothing can wake us again.
            futures::future::pending::<()>().await;
        }
    }
}

/// One look for ready work by a waiting claimer.
#[derive(Debug)]
pub enum Probe {
    /// Tasks were claimed (never empty).
    Claimed(Vec<Task>),
    /// Nothing ready; the earliest delayed task among the watched queues is due after this
    /// long (on the clock the loop waits on), if there is one.
    Idle {
        /// Time until the next due task.
        next_due_in: Option<Duration>,
    },
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

/// The waiting loop of `dequeue`: probe, and while nothing is ready wait for the first of an
/// in-process wake, the next due time on `clock`, a real-time `poll` (other processes' writes),
/// or the broker closing (then `Closed`). The probe should itself check the lifecycle; it is
/// told why it looks ([`Look`]), so a backend may claim at once after a wake-up instead of
/// looking first.
pub async fn wait_for_work<F, Fut>(
    hub: &WakeHub,
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
    loop {
        if *closed.borrow_and_update() {
            return Err(Error::Closed);
        }
        let mut listener = hub.listener();
        let next_due_in = match probe(look).await {
            Ok(Probe::Claimed(tasks)) if !tasks.is_empty() => return Ok(tasks),
            Ok(Probe::Claimed(_)) => None,
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
        let polled = async {
            match poll {
                Some(p) => tokio::time::sleep(p).await,
                None => futures::future::pending().await,
            }
        };
        look = tokio::select! {
            _ = listener.changed() => Look::Woken,
            _ = due => Look::Timer,
            _ = polled => Look::Timer,
            _ = closed.changed() => Look::Timer,
        };
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
        let got = wait_for_work(&hub, &life, &clock, None, |look| {
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
            wait_for_work(&hub, &life, &clock, None, |_| async {
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
        let res = wait_for_work(&hub, &life, &clock, None, |_| async {
            life.close(); // the pool closes under the probe
            Err(Error::backend("test", "pool closed"))
        })
        .await;
        assert_eq!(res.err().map(|e| e.kind()), Some(crate::ErrorKind::Closed));
        let open = Lifecycle::new();
        let res = wait_for_work(&hub, &open, &clock, None, |_| async {
            Err(Error::backend("test", "disk full"))
        })
        .await;
        assert_eq!(res.err().map(|e| e.kind()), Some(crate::ErrorKind::Backend));
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
