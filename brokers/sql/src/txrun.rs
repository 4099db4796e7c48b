//! The transaction retry loop of contract §11.2 ([`TxRun`]): one write transaction run until it
//! commits or fails for good, settling a COMMIT whose answer was lost where the operation asks.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use taskgate::ResolvedOptions;

use crate::adapter::{DbError, WriteTx};
use crate::core::{backoff, Core};
use crate::resolve::Settling;
use crate::tx::{Tx, TxFail};
use crate::unresolved::Settled;

/// How one attempt of a write transaction ended (what [`TxRun::run`] decides on).
pub(crate) enum Attempt<T> {
    /// Committed; the value, the Notify snapshots and whether waiters must be woken.
    Done(Settled<T>),
    /// Failed before or at a COMMIT that the server answered (rolled back, or never sent).
    Failed(TxFail),
    /// The connection was lost during COMMIT: the server may or may not have applied it.
    /// Carries what the attempt would have returned.
    CommitUnknown(DbError, Settled<T>),
}

/// A transaction body's future for one attempt: it borrows the transaction and the body's
/// arguments for that attempt only.
pub(crate) type TxFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, TxFail>> + Send + 'a>>;

/// A caller that may go away while its write waits for a connection (a claimer whose
/// `dequeue` was dropped): [`TxRun::abandon`] stops waiting when it leaves.
pub(crate) trait Leaving: Send {
    /// Completes when the caller has left.
    fn left(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// True when the caller has left.
    fn has_left(&self) -> bool;
}

impl<M: Send> Leaving for tokio::sync::oneshot::Sender<M> {
    fn left(&mut self) -> Pin<Box<dyn Future<Output = ()> + Send + '_>> {
        Box::pin(self.closed())
    }

    fn has_left(&self) -> bool {
        self.is_closed()
    }
}

/// One write transaction with the retry loop of contract §11.2, built by [`Core::tx`] and run
/// by [`TxRun::run`]: rollback and classify on a driver error, retry deadlocks at once (up to
/// 5 attempts; lock-wait timeouts at most 2) after a real-time back-off, return contract
/// errors as they are. Snapshots of a failed attempt are dropped; the last attempt's are
/// published after commit, and waiters are woken when the body called [`Tx::wake`].
///
/// A COMMIT whose connection was lost ([`Dialect::is_connection_lost`](crate::Dialect::is_connection_lost)) may or may not have
/// been applied. By default that ends the loop with [`TxFail::Unknown`]. With
/// [`TxRun::settle`] the operation settles it instead (enqueue, ack): the attempt's would-be
/// result is pushed to the given list and the transaction runs again — its body must make a
/// second run find out what the first did (the same IDs; a token check) — retrying lost
/// connections for [`RESOLVE_WINDOW`](crate::resolve::RESOLVE_WINDOW) before it gives up with [`TxFail::Unknown`] (from the
/// first attempt when the list holds attempts already). The caller compares the outcome with
/// the list.
///
/// With [`TxRun::abandon`], the wait for a connection (the writer, on SQLite) ends with
/// [`TxFail::Abandoned`] when the caller leaves first, and a caller that left while it waited
/// gets nothing written (adapters' `begin` is cancel-safe).
pub(crate) struct TxRun<'r, T> {
    core: &'r Core,
    opts: &'r ResolvedOptions,
    op: &'static str,
    settle: Option<&'r mut Vec<Settled<T>>>,
    /// An earlier write of this call lost its outcome (a one-statement write whose answer
    /// never came): settle from the first attempt, as with a non-empty `settle` list.
    lost_before: bool,
    leaving: Option<&'r mut dyn Leaving>,
}

impl Core {
    /// A write transaction named `op` (the name test hooks see) under `opts`.
    pub(crate) fn tx<'r, T>(&'r self, opts: &'r ResolvedOptions, op: &'static str) -> TxRun<'r, T> {
        TxRun { core: self, opts, op, settle: None, lost_before: false, leaving: None }
    }
}

impl<'r, T: Send> TxRun<'r, T> {
    /// Settles a COMMIT of unknown outcome by running again; see [`TxRun`].
    pub(crate) fn settle(mut self, unknown: &'r mut Vec<Settled<T>>) -> Self {
        self.settle = Some(unknown);
        self
    }

    /// Settles from the first attempt when `lost` (an earlier write of the call, outside this
    /// transaction, lost its outcome): lost connections are retried for [`RESOLVE_WINDOW`](crate::resolve::RESOLVE_WINDOW)
    /// and then end with [`TxFail::Unknown`], never with a definite error.
    pub(crate) fn after_lost(mut self, lost: bool) -> Self {
        self.lost_before = lost;
        self
    }

    /// Gives up when `caller` leaves before the transaction starts; see [`TxRun`].
    pub(crate) fn abandon(mut self, caller: &'r mut dyn Leaving) -> Self {
        self.leaving = Some(caller);
        self
    }

    /// Runs `body(tx, args)` in the transaction until it commits or fails for good.
    ///
    /// The body borrows `args` (not its own captures) so that its future may hold them
    /// across awaits; an `async` closure cannot be used here because its future cannot be
    /// proven `Send` for every borrow of the transaction on stable Rust.
    pub(crate) async fn run<A, F>(mut self, args: &A, mut body: F) -> Result<T, TxFail>
    where
        A: Sync + ?Sized,
        F: for<'a, 'c> FnMut(&'a mut Tx<'c>, &'a A) -> TxFuture<'a, T> + Send,
    {
        // A list that holds attempts already (a lost one-statement write, the lost COMMITs of
        // an earlier call) is being settled from the start.
        let from_start = self.lost_before || self.settle.as_ref().is_some_and(|u| !u.is_empty());
        let mut settling = Settling::new(from_start);
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let outcome = self.attempt(args, &mut body).await;
            match self.next(outcome, &mut settling, attempt) {
                Next::Done(value) => return Ok(value),
                Next::Fail(e) => return Err(e),
                Next::Retry(wait) => tokio::time::sleep(wait).await,
            }
        }
    }

    /// What follows attempt `attempt`'s outcome.
    fn next(&mut self, outcome: Attempt<T>, settling: &mut Settling, attempt: u32) -> Next<T> {
        match outcome {
            Attempt::Done(done) => Next::Done(self.publish(done)),
            Attempt::CommitUnknown(e, done) => self.commit_unknown(e, done, settling, attempt),
            Attempt::Failed(TxFail::Db(e)) => self.failed(e, settling, attempt),
            Attempt::Failed(e) => Next::Fail(e),
        }
    }

    /// A committed attempt: wakes its waiters, publishes its Notify snapshots.
    fn publish(&self, (value, snapshots, wakes): Settled<T>) -> T {
        self.core.hub.wake_for(&wakes);
        self.opts.notifier.publish(snapshots);
        value
    }

    /// A COMMIT whose answer was lost: the outcome is unknown, unless the operation settles
    /// it ([`TxRun::settle`]) — then the attempt is remembered and the transaction runs again.
    fn commit_unknown(
        &mut self,
        e: DbError,
        done: Settled<T>,
        settling: &mut Settling,
        attempt: u32,
    ) -> Next<T> {
        let Some(unknown) = self.settle.as_mut() else { return Next::Fail(TxFail::Unknown(e)) };
        unknown.push(done);
        settling.start();
        self.core.count_retry();
        Next::Retry(backoff(attempt))
    }

    /// A driver error: while settling, an unreachable server is tried again within the
    /// window ([`Settling::unreachable`]); otherwise the retry policy of §11.2 decides.
    fn failed(&self, e: DbError, settling: &Settling, attempt: u32) -> Next<T> {
        match settling.unreachable(self.core, &e) {
            Some(true) => {
                self.core.count_retry();
                Next::Retry(backoff(attempt))
            }
            Some(false) => Next::Fail(TxFail::Unknown(e)),
            None if self.core.should_retry(&e, attempt) => {
                Next::Retry(self.core.retry_backoff(attempt))
            }
            None => Next::Fail(TxFail::Db(e)),
        }
    }

    /// One attempt: begin (or leave with the caller), run the body, commit or roll back.
    async fn attempt<A, F>(&mut self, args: &A, body: &mut F) -> Attempt<T>
    where
        A: Sync + ?Sized,
        F: for<'a, 'c> FnMut(&'a mut Tx<'c>, &'a A) -> TxFuture<'a, T> + Send,
    {
        let mut wtx = match self.begin().await {
            Ok(wtx) => wtx,
            Err(e) => return Attempt::Failed(e),
        };
        let done = {
            let mut tx = Tx::new(wtx.conn(), self.core, self.opts);
            let value = body(&mut tx, args).await;
            value.map(|value| {
                (value, std::mem::take(&mut tx.snapshots), std::mem::take(&mut tx.wakes))
            })
        };
        match done {
            Ok(done) => commit(self.core, self.op, wtx, done).await,
            Err(e) => {
                let _ = wtx.rollback().await;
                Attempt::Failed(e)
            }
        }
    }

    /// Opens the attempt's transaction. A caller that left already (a claim whose `dequeue`
    /// was dropped, before its first attempt or while a conflict's back-off ran) costs no
    /// connection and no `BEGIN`; one that leaves while the attempt waits for a connection, or
    /// left meanwhile, gets nothing written (instead of a write that must be undone).
    async fn begin(&mut self) -> Result<Box<dyn WriteTx>, TxFail> {
        let core = self.core;
        if self.caller_left() {
            return Err(TxFail::Abandoned);
        }
        let begun = match self.leaving.as_mut() {
            None => core.adapter.begin().await,
            Some(caller) => tokio::select! {
                biased;
                begun = core.adapter.begin() => begun,
                () = caller.left() => return Err(TxFail::Abandoned),
            },
        };
        let wtx = begun?;
        if self.caller_left() {
            let _ = wtx.rollback().await;
            return Err(TxFail::Abandoned);
        }
        Ok(wtx)
    }

    /// True when the caller of an abandonable write ([`TxRun::abandon`]) has left.
    fn caller_left(&self) -> bool {
        self.leaving.as_ref().is_some_and(|caller| caller.has_left())
    }
}

/// Commits an attempt's writes (after the test hook, when one is installed): `op`'s.
async fn commit<T>(core: &Core, op: &str, wtx: Box<dyn WriteTx>, done: Settled<T>) -> Attempt<T> {
    core.run_before_commit_hook(op);
    match wtx.commit(done.2.any()).await {
        Ok(()) => Attempt::Done(done),
        Err(e) if core.dialect.is_connection_lost(&e) => Attempt::CommitUnknown(e, done),
        Err(e) => Attempt::Failed(TxFail::Db(e)),
    }
}

/// What the retry loop does after an attempt.
enum Next<T> {
    /// Return the committed value.
    Done(T),
    /// Fail with this.
    Fail(TxFail),
    /// Run again after this real-time back-off.
    Retry(Duration),
}
