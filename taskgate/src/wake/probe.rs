//! One look for work: what it answers, why it looks, and what the claimer claims.

use std::time::Duration;

use crate::Task;

#[cfg(doc)]
use super::{wait_for_work, WakeHub, HELD_RELOOK};

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
