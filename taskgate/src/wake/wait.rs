//! The waiting loop every backend's `dequeue` runs.

use std::future::Future;
use std::time::Duration;

use super::{Interest, Lifecycle, Look, Probe, WakeHub};
use crate::{Clock, Error, Result, Task};

/// Looks again after a look saw ready work but claimed none of it (rows held by other
/// claimers): after 1, 2, 4 … 128 ms of real time; then the claimer waits as usual.
const CONTENDED_RELOOKS: u32 = 8;

/// The latest a [`Probe::Held`] look is followed by another when no wake-up comes first:
/// the last step of the contended re-looks. It bounds the wait for rows left ready with no
/// wake-up: rows InnoDB locked while a claim examined them and did not take, or rows another
/// process's claim held while this handle's claims were also under way.
pub const HELD_RELOOK: Duration = Duration::from_millis(1 << (CONTENDED_RELOOKS - 1));

/// What a [`wait_for_work`] loop waits under: the hub that wakes it, what it claims, the
/// handle's lifecycle, the clock due times run on, and the real-time poll interval.
#[derive(Clone, Copy)]
pub struct Waiting<'a> {
    /// The in-process signal.
    pub hub: &'a WakeHub,
    /// The queues watched and the batch one claim takes (for counted wakes).
    pub interest: Interest<'a>,
    /// The handle's lifecycle: its close ends the loop with `Closed`.
    pub life: &'a Lifecycle,
    /// The clock delayed tasks come due on.
    pub clock: &'a dyn Clock,
    /// How often to look for other processes' writes (real time); `None`: only on wakes and
    /// due times.
    pub poll: Option<Duration>,
}

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
pub async fn wait_for_work<F, Fut>(waiting: Waiting<'_>, mut probe: F) -> Result<Vec<Task>>
where
    F: FnMut(Look) -> Fut + Send,
    Fut: Future<Output = Result<Probe>> + Send,
{
    let Waiting { hub, interest, life, clock, poll } = waiting;
    let mut closed = life.closed_receiver();
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
