//! The history: every call the actors make, with a start and an end stamp from one global
//! counter (so "A ended before B started" is a fact), its task, its token and its result.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use taskgate::ErrorKind;

/// What a recorded call did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Act {
    Enqueue,
    Claim,
    Heartbeat,
    Ack,
    Fail,
    Requeue,
    FinishCanceled,
    Cancel,
    Reap,
}

/// How a recorded call ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Res {
    Ok,
    Err(ErrorKind),
    /// Its future was dropped before it finished: the outcome is unknown.
    Dropped,
}

/// One call.
#[derive(Clone, Debug)]
pub(crate) struct Record {
    pub(crate) actor: String,
    pub(crate) act: Act,
    pub(crate) task: String,
    pub(crate) token: String,
    pub(crate) start: u64,
    pub(crate) end: u64,
    pub(crate) res: Res,
}

impl Record {
    /// True when the call held a valid lease: a token call that succeeded (a heartbeat that
    /// reports a cancel request renewed the lease first).
    pub(crate) fn held_lease(&self) -> bool {
        let token_call = matches!(
            self.act,
            Act::Heartbeat | Act::Ack | Act::Fail | Act::Requeue | Act::FinishCanceled
        );
        token_call && (self.res == Res::Ok || self.res == Res::Err(ErrorKind::Canceled))
    }
}

impl fmt::Display for Record {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "[{}..{}] {} {:?} {} token {:?} -> {:?}",
            self.start, self.end, self.actor, self.act, self.task, self.token, self.res
        )
    }
}

/// Collects records from every actor.
#[derive(Debug, Default)]
pub(crate) struct Recorder {
    clock: AtomicU64,
    records: Mutex<Vec<Record>>,
}

impl Recorder {
    /// A start stamp.
    pub(crate) fn start(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst)
    }

    /// Records a call that started at `start` and ends now.
    pub(crate) fn finish(
        &self,
        actor: &str,
        act: Act,
        task: &str,
        token: &str,
        start: u64,
        res: Res,
    ) {
        let end = self.clock.fetch_add(1, Ordering::SeqCst);
        let record = Record {
            actor: actor.to_owned(),
            act,
            task: task.to_owned(),
            token: token.to_owned(),
            start,
            end,
            res,
        };
        self.records.lock().unwrap_or_else(|p| p.into_inner()).push(record);
    }

    /// Every record so far.
    pub(crate) fn all(&self) -> Vec<Record> {
        self.records.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

/// A small deterministic generator (splitmix64): each actor's choices follow from the seed.
#[derive(Clone, Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        Rng(seed)
    }

    pub(crate) fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: usize) -> usize {
        let n64 = u64::try_from(n.max(1)).unwrap_or(u64::MAX);
        usize::try_from(self.next() % n64).unwrap_or(0)
    }

    /// True with probability `percent` / 100.
    pub(crate) fn chance(&mut self, percent: usize) -> bool {
        self.below(100) < percent
    }
}
