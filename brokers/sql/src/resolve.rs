//! Settling a write whose outcome was lost with the connection (docs/decisions.md,
//! "Connections and failures"): every step, for every write path, is here.
//!
//! * Whether a failed write may have been applied: a COMMIT (or a one-statement write) whose
//!   connection was lost after it could have reached the server ([`Core::maybe_applied`]).
//! * The settle window ([`Settling`]): a transaction that settles a lost outcome keeps trying
//!   an unreachable server for [`RESOLVE_WINDOW`], then reports the outcome as unknown.
//! * Enqueue ([`settle_enqueue`]): the transaction runs again under the IDs it chose before
//!   the first attempt (the primary key makes a second copy impossible); the rows read back
//!   are compared with what each lost attempt wrote.
//! * Ack ([`settle_acks`]): the transaction runs again with the same tokens; an item it finds
//!   no longer running is settled by the task's `ack_token` (a lost one-statement ack: the
//!   statement writes the token it acked with, and a token belongs to one claim), then by
//!   `finished_at` and the result read back (a lost transaction).
//! * Every other write, and a settle that cannot finish: the caller's error says the outcome
//!   is unknown ([`CommitUnknown`], [`Core::fail`]), and the handle remembers what repeating
//!   an enqueue or ack needs to settle it ([`Unresolved`](crate::unresolved::Unresolved)).

use std::collections::HashMap;
use std::time::{Duration, Instant};

use taskgate::{AckItem, BoxError, Error, ResolvedOptions, Result, Status, Task, Timestamp};

use crate::adapter::DbError;
use crate::core::Core;
use crate::ops::ack::AckRun;
use crate::ops::read;
use crate::tx::TxFail;
use crate::unresolved::{LostAck, Settled, UnsettledEnqueue};

/// How long a write whose COMMIT's outcome is unknown keeps trying to find out (retrying on a
/// fresh connection while the server cannot be reached) before it reports the outcome as
/// unknown.
pub(crate) const RESOLVE_WINDOW: Duration = Duration::from_secs(5);

/// A write's outcome is unknown: the connection was lost while its COMMIT (or its one
/// autocommit statement) was on its way, so the server may or may not have applied it, and
/// finding out failed too. The source of an [`Error::Backend`] that says so; every write path
/// reports a lost outcome with it, never with a definite error ([`is_commit_unknown`]).
#[derive(Debug)]
pub struct CommitUnknown {
    /// The last error: the driver's on the COMMIT, or on the last attempt to find out.
    pub source: BoxError,
}

impl std::fmt::Display for CommitUnknown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "connection lost during COMMIT: the write may or may not have been applied \
             (for enqueue and ack: the server could not be asked; repeating the same call on \
             this handle settles it): {}",
            self.source
        )
    }
}

impl std::error::Error for CommitUnknown {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&*self.source)
    }
}

/// True when `e` says that a write's outcome is unknown: `Backend` whose source is a
/// [`CommitUnknown`] — the one error after which a write may or may not have been applied.
/// Every other error of a write means nothing of it was applied.
pub fn is_commit_unknown(e: &Error) -> bool {
    std::error::Error::source(e).is_some_and(|s| s.is::<CommitUnknown>())
}

impl Core {
    /// A transaction failure as the caller's error: contract errors as they are, driver
    /// errors as `Backend`, a lost outcome as [`Core::unknown`].
    pub(crate) fn fail(&self, e: TxFail) -> Error {
        match e {
            TxFail::Op(e) => e,
            TxFail::Db(e) => self.backend_error(e),
            TxFail::Abandoned => Error::backend(self.name(), "the caller went away"),
            TxFail::Unknown(source) => self.unknown(source),
        }
    }

    /// A write whose outcome is unknown (`source`: the last error while finding out) as the
    /// caller's error: `Backend` with a [`CommitUnknown`] source.
    pub(crate) fn unknown(&self, source: impl Into<BoxError>) -> Error {
        Error::backend(self.name(), CommitUnknown { source: source.into() })
    }

    /// True when a one-statement (autocommit) write that failed with `e` may have been
    /// applied: its connection was lost ([`Dialect::is_connection_lost`]) after it could
    /// have reached the server. A connection that was never made (refused, no such host, no
    /// pooled connection in time) sent nothing.
    ///
    /// [`Dialect::is_connection_lost`]: crate::Dialect::is_connection_lost
    pub(crate) fn maybe_applied(&self, e: &DbError) -> bool {
        self.dialect.is_connection_lost(e) && !never_connected(e)
    }
}

/// True for an error that means no connection was made, so no statement was sent: a refused
/// connection, a host that cannot be found or reached, a pool that handed out no connection.
/// (A connection that was made and then lost fails with a reset, a broken pipe or an
/// unexpected end of stream instead.)
fn never_connected(e: &DbError) -> bool {
    use std::io::ErrorKind as Io;
    match e {
        DbError::Io(io) => matches!(
            io.kind(),
            Io::ConnectionRefused
                | Io::NotFound
                | Io::AddrNotAvailable
                | Io::HostUnreachable
                | Io::NetworkUnreachable
        ),
        DbError::PoolTimedOut | DbError::PoolClosed => true,
        _ => false,
    }
}

/// The settle window of one write transaction: open from its first lost outcome (or from the
/// start, when the call settles an earlier one) for [`RESOLVE_WINDOW`].
pub(crate) struct Settling {
    until: Option<Instant>,
}

impl Settling {
    /// Not settling yet, or settling from the start (`from_start`: a lost one-statement write
    /// of the call, or an earlier call's lost COMMITs).
    pub(crate) fn new(from_start: bool) -> Settling {
        Settling { until: from_start.then(|| Instant::now() + RESOLVE_WINDOW) }
    }

    /// A COMMIT's answer was lost: settling starts now, if it had not.
    pub(crate) fn start(&mut self) {
        self.until.get_or_insert_with(|| Instant::now() + RESOLVE_WINDOW);
    }

    /// For an attempt that failed with `e` while settling: `Some(true)` when the server could
    /// not be reached and the window is open (try again), `Some(false)` when it has closed
    /// (the outcome stays unknown); `None` when not settling, or `e` is not a lost
    /// connection (the ordinary retry policy decides).
    pub(crate) fn unreachable(&self, core: &Core, e: &DbError) -> Option<bool> {
        let until = self.until?;
        core.dialect.is_connection_lost(e).then(|| Instant::now() < until)
    }
}

/// True when `stored` (read back now) is the task an attempt wrote as `written`: the fields
/// an enqueue sets and nothing later changes — ID, type, queue, payload, business key,
/// owner, parents, parent-failure policy, retry budget, priority and creation time. Status, lease,
/// counters, result and step fields move on after the enqueue and are not compared. A
/// `written` creation time of zero is the server's time, not known to the attempt (a lost
/// one-statement enqueue, whose generated ID no other call uses): not compared either.
pub(crate) fn same_submission(stored: &Task, written: &Task) -> bool {
    stored.id == written.id
        && stored.task_type == written.task_type
        && stored.queue == written.queue
        && stored.payload == written.payload
        && stored.business_key == written.business_key
        && stored.owner == written.owner
        && stored.depends_on == written.depends_on
        && stored.on_parent_failure == written.on_parent_failure
        && stored.max_retry == written.max_retry
        && stored.priority == written.priority
        && (written.created_at.is_zero() || stored.created_at == written.created_at)
}

/// Gives each task of a settled attempt whose creation time was the server's (zero in the
/// attempt: [`same_submission`]) the time `stored` holds, and that time as its `run_at` when
/// the task left it open.
pub(crate) fn fill_server_times(tasks: &mut [Task], stored: &HashMap<String, Task>) {
    for task in tasks.iter_mut().filter(|t| t.created_at.is_zero()) {
        if let Some(row) = stored.get(&task.id) {
            task.created_at = row.created_at;
            if task.run_at.is_zero() {
                task.run_at = row.created_at;
            }
        }
    }
}

/// The index of the attempt in `attempts` whose tasks all appear in `stored` as written.
pub(crate) fn applied_enqueue(
    stored: &HashMap<String, Task>,
    attempts: &[Settled<Vec<Task>>],
) -> Option<usize> {
    attempts.iter().position(|(written, _, _)| {
        written.iter().all(|w| stored.get(&w.id).is_some_and(|s| same_submission(s, w)))
    })
}

/// Settles an enqueue whose attempt's COMMIT was lost (`unknown`) and whose last attempt
/// failed with `e`: the rows under `ids`, read back, tell whether a lost attempt was
/// applied — then the call succeeded with what that attempt stored (its Notify snapshots
/// are published now). Otherwise the call fails: with `e` when it is definite (nothing was
/// applied), and as unknown when `e` itself is an unknown outcome or the rows cannot be read —
/// then the call is remembered so that repeating it settles it.
pub(crate) async fn settle_enqueue(
    core: &Core,
    opts: &ResolvedOptions,
    tasks: &[Task],
    ids: Vec<String>,
    unknown: Vec<Settled<Vec<Task>>>,
    e: TxFail,
) -> std::result::Result<Vec<Task>, TxFail> {
    let refs: Vec<&str> = ids.iter().map(String::as_str).collect();
    let stored = read::by_ids(core, &refs).await;
    let e = match (stored, e) {
        (Ok(stored), e) => match applied_enqueue(&stored, &unknown) {
            Some(i) => {
                let (mut value, snapshots, wakes) = unknown.into_iter().nth(i).unwrap_or_default();
                fill_server_times(&mut value, &stored);
                core.hub.wake_for(&wakes);
                if wakes.any() {
                    // Other processes were not told at the lost commit.
                    core.adapter.woke();
                }
                opts.notifier.publish(snapshots);
                return Ok(value);
            }
            None if !matches!(e, TxFail::Unknown(_)) => return Err(e),
            None => e,
        },
        (Err(_), TxFail::Unknown(lost)) => TxFail::Unknown(lost),
        // A lost attempt may have been applied and cannot be read: unknown, not `read`.
        (Err(read), _) => TxFail::Op(core.unknown(read)),
    };
    let input = tasks.to_vec();
    core.unresolved.put_enqueue(UnsettledEnqueue { input, ids, attempts: unknown });
    Err(e)
}

/// Settles one ack transaction's outcome. `done` is the last attempt's; `unknown` the
/// attempts whose COMMIT was lost, `earlier` what lost attempts of this or an earlier call
/// wrote per item. An item the last attempt found no longer running with its token
/// (LeaseLost) is `Ok` when a lost attempt was applied: its `ack_token` is the item's token (a
/// lost one-statement ack, [`settle_by_token`]), or the task is completed with exactly the
/// `finished_at` a lost transaction wrote and the item's result ([`settle_by_row`]; its Notify
/// snapshots are published now). When the outcome stays unknown, what each item's lost
/// attempts wrote is remembered so that repeating the ack settles it ([`unsettled`]).
pub(crate) async fn settle_acks(
    core: &Core,
    opts: &ResolvedOptions,
    chunk: &[AckItem],
    earlier: Vec<LostAck>,
    unknown: Vec<Settled<AckRun>>,
    done: std::result::Result<AckRun, TxFail>,
) -> Result<Vec<Result<()>>> {
    let wrote = lost_writes(earlier, &unknown);
    let mut outcomes = match done {
        Ok((outcomes, _)) => outcomes,
        Err(e) => return Err(unsettled(core, chunk, &wrote, core.fail(e))),
    };
    if let Err(read) = settle_by_token(core, chunk, &wrote, &mut outcomes).await {
        return Err(unsettled(core, chunk, &wrote, read));
    }
    let applied = match settle_by_row(core, chunk, &wrote, &mut outcomes).await {
        Ok(applied) => applied,
        Err(read) => return Err(unsettled(core, chunk, &wrote, read)),
    };
    // The lost attempt that was applied committed whole: publish what it would have.
    for ((_, now), snapshots, wakes) in unknown {
        if now.is_some_and(|now| applied.contains(&now)) {
            core.hub.wake_for(&wakes);
            opts.notifier.publish(snapshots);
        }
    }
    Ok(outcomes)
}

/// Per item, what lost attempts wrote for it: `earlier`'s, plus the `finished_at` of each
/// attempt in `unknown` that acked it.
fn lost_writes(earlier: Vec<LostAck>, unknown: &[Settled<AckRun>]) -> Vec<LostAck> {
    let mut wrote = earlier;
    for ((outcomes, now), _, _) in unknown {
        for (i, outcome) in outcomes.iter().enumerate() {
            if let (Ok(()), Some(now), Some(w)) = (outcome, now, wrote.get_mut(i)) {
                w.finished.push(*now);
            }
        }
    }
    wrote
}

/// True when item `i` came out `LeaseLost` and `lost` says a lost attempt may have acked it.
fn suspect(
    outcomes: &[Result<()>],
    wrote: &[LostAck],
    i: usize,
    lost: impl Fn(&LostAck) -> bool,
) -> bool {
    matches!(outcomes.get(i), Some(Err(Error::LeaseLost { .. }))) && wrote.get(i).is_some_and(lost)
}

/// Settles the suspect items whose lost write was a one-statement ack: applied exactly when
/// the task's `ack_token` is the item's token.
async fn settle_by_token(
    core: &Core,
    chunk: &[AckItem],
    wrote: &[LostAck],
    outcomes: &mut [Result<()>],
) -> Result<()> {
    let suspects: Vec<usize> =
        (0..chunk.len()).filter(|i| suspect(outcomes, wrote, *i, |w| w.autocommit)).collect();
    if suspects.is_empty() {
        return Ok(());
    }
    let ids: Vec<&str> = suspects.iter().map(|i| chunk[*i].id.as_str()).collect();
    let tokens = read::ack_tokens(core, &ids).await?;
    for i in suspects {
        let item = &chunk[i];
        if tokens.get(&item.id).is_some_and(|t| *t == item.token) {
            outcomes[i] = Ok(());
        }
    }
    Ok(())
}

/// Settles the suspect items a lost transaction may have acked: applied when the task is
/// completed with exactly the `finished_at` that transaction wrote and the item's result.
/// Returns the `finished_at` of the applied ones.
async fn settle_by_row(
    core: &Core,
    chunk: &[AckItem],
    wrote: &[LostAck],
    outcomes: &mut [Result<()>],
) -> Result<Vec<Timestamp>> {
    let suspects: Vec<usize> = (0..chunk.len())
        .filter(|i| suspect(outcomes, wrote, *i, |w| !w.finished.is_empty()))
        .collect();
    if suspects.is_empty() {
        return Ok(Vec::new());
    }
    let ids: Vec<&str> = suspects.iter().map(|i| chunk[*i].id.as_str()).collect();
    let stored = read::by_ids(core, &ids).await?;
    let mut applied = Vec::new();
    for i in suspects {
        let item = &chunk[i];
        let Some(task) = stored.get(&item.id) else { continue };
        let finished = task.finished_at.filter(|at| wrote[i].finished.contains(at));
        if task.status == Status::Completed && task.result == item.result {
            if let Some(at) = finished {
                outcomes[i] = Ok(());
                applied.push(at);
            }
        }
    }
    Ok(applied)
}

/// An ack call that cannot settle: each item a lost attempt may have acked is remembered,
/// so that repeating it settles it, and the call fails as unknown when there is such an
/// item — never with a definite error.
fn unsettled(core: &Core, chunk: &[AckItem], wrote: &[LostAck], e: Error) -> Error {
    let mut lost = false;
    for (item, w) in chunk.iter().zip(wrote) {
        if !w.is_empty() {
            lost = true;
            core.unresolved.put_ack(&item.id, &item.token, w.clone());
        }
    }
    match e {
        Error::Backend { source, .. } if lost && !source.is::<CommitUnknown>() => {
            core.unknown(source)
        }
        e => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn written() -> Task {
        let mut t = Task::new("t", "q").with_id("01J").with_payload(b"p".to_vec());
        t.created_at = Timestamp::from_millis(5);
        t
    }

    #[test]
    fn a_submission_is_recognised_by_what_the_enqueue_wrote_only() {
        let w = written();
        let mut later = w.clone();
        later.status = taskgate::Status::Completed;
        later.attempts = 1;
        later.result = Some(b"r".to_vec());
        assert!(same_submission(&later, &w), "what changed after the enqueue is not compared");
        let mut other = w.clone();
        other.created_at = Timestamp::from_millis(6);
        assert!(!same_submission(&other, &w), "another enqueue of the same ID");
        let mut other = w.clone();
        other.payload = None;
        assert!(!same_submission(&other, &w));
    }

    #[test]
    fn the_attempt_whose_rows_are_all_there_is_the_applied_one() {
        let first = written();
        let mut second = written();
        second.created_at = Timestamp::from_millis(9);
        let woke = || {
            let mut wakes = taskgate::wake::Wakes::default();
            wakes.ready("q");
            wakes
        };
        let attempts = vec![
            (vec![first.clone()], vec![], taskgate::wake::Wakes::default()),
            (vec![second.clone()], vec![], woke()),
        ];
        let stored = HashMap::from([(second.id.clone(), second)]);
        assert_eq!(applied_enqueue(&stored, &attempts), Some(1));
        assert_eq!(applied_enqueue(&HashMap::new(), &attempts), None);
    }

    #[test]
    fn a_lost_one_statement_enqueue_is_recognised_without_the_servers_time() {
        let stored = written();
        let mut lost = written();
        lost.created_at = Timestamp::ZERO;
        assert!(same_submission(&stored, &lost), "the server's time is not compared");
        let mut other = lost.clone();
        other.payload = Some(b"other".to_vec());
        assert!(!same_submission(&stored, &other), "everything else still is");
        let rows = HashMap::from([(stored.id.clone(), stored.clone())]);
        let mut open = lost.clone();
        open.run_at = Timestamp::ZERO;
        let mut delayed = lost.clone();
        delayed.run_at = Timestamp::from_millis(90);
        let mut settled = [open, delayed];
        fill_server_times(&mut settled, &rows);
        assert_eq!(
            settled.each_ref().map(|t| (t.created_at, t.run_at)),
            [
                (stored.created_at, stored.created_at),
                (stored.created_at, Timestamp::from_millis(90)),
            ]
        );
    }
}
