//! Waking blocked claimers: the in-process signal every backend raises after a write, and the
//! one waiting loop every backend's `dequeue` runs (contract §3.4 "Dequeue", extensions §E2).
//!
//! - [`hub`]: the signal ([`WakeHub`], its counted [`Wakes`] and the [`WakeListener`] a
//!   claimer takes before it looks);
//! - [`probe`]: what one look answers ([`Probe`]), why it looks ([`Look`]) and what it claims
//!   ([`Interest`]);
//! - [`wait`]: the loop itself ([`wait_for_work`], given a [`Waiting`]);
//! - [`life`]: a handle's [`Lifecycle`], whose close ends every loop.

pub mod hub;
pub mod life;
pub mod probe;
pub mod wait;

pub use hub::{WakeHub, WakeListener, Wakes};
pub use life::Lifecycle;
pub use probe::{Interest, Look, Probe};
pub use wait::{wait_for_work, Waiting, HELD_RELOOK};

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Error, ManualClock, Result, Task};
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    #[tokio::test]
    async fn wake_between_probe_and_wait_is_not_missed() {
        let hub = Arc::new(WakeHub::new());
        let life = Lifecycle::new();
        let clock = ManualClock::at_contract_epoch();
        let probes = AtomicUsize::new(0);
        let looks = std::sync::Mutex::new(Vec::new());
        let got = wait_for_work(
            Waiting {
                hub: &hub,
                interest: Interest::default(),
                life: &life,
                clock: &clock,
                poll: None,
            },
            |look| {
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
            },
        )
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
            wait_for_work(
                Waiting {
                    hub: &hub,
                    interest: Interest::default(),
                    life: &life,
                    clock: &clock,
                    poll: None,
                },
                |_| async { Ok(Probe::Idle { next_due_in: None }) },
            )
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
        let res = wait_for_work(
            Waiting {
                hub: &hub,
                interest: Interest::default(),
                life: &life,
                clock: &clock,
                poll: None,
            },
            |_| async {
                life.close(); // the pool closes under the probe
                Err(Error::backend("test", "pool closed"))
            },
        )
        .await;
        assert_eq!(res.err().map(|e| e.kind()), Some(crate::ErrorKind::Closed));
        let open = Lifecycle::new();
        let res = wait_for_work(
            Waiting {
                hub: &hub,
                interest: Interest::default(),
                life: &open,
                clock: &clock,
                poll: None,
            },
            |_| async { Err(Error::backend("test", "disk full")) },
        )
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
        let got = wait_for_work(
            Waiting { hub: &hub, interest, life: &life, clock: &clock, poll: None },
            |_| {
                let ready = ready.clone();
                async move {
                    match ready.swap(0, Ordering::SeqCst) {
                        0 => Ok(Probe::Idle { next_due_in: None }),
                        _ => Ok(Probe::Claimed(vec![Task::new("t", "work")])),
                    }
                }
            },
        )
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
                wait_for_work(
                    Waiting { hub: &hub, interest, life: &life, clock: &*clock, poll: None },
                    |_| {
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
                    },
                )
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
        let waiting = wait_for_work(
            Waiting { hub: &hub, interest, life: &life, clock: &clock, poll: None },
            probe,
        );
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
        let waiting = wait_for_work(
            Waiting { hub: &hub, interest, life: &life, clock: &clock, poll: None },
            probe,
        );
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
