//! Combining concurrent claims and acks of one handle into one transaction, on adapters where
//! every write transaction queues for one writer connection ([`Adapter::shares_writer`]:
//! SQLite).
//!
//! There, each write call costs its turn on the writer plus a round trip to the driver per
//! statement, whatever it writes; group commit already shares the COMMIT, but at batch 1 the
//! turns themselves set the rate (report notes, finding 12). So concurrent `dequeue_many`
//! calls for the same queues become one claim of the sum of their batch sizes, and concurrent
//! `ack_many` calls one `ack_many` of all their items — what River's completer does for acks.
//!
//! The first caller to find no leader spawns one; the leader takes every request waiting,
//! runs them as one call, answers each caller with its share, and goes on while requests keep
//! arriving; an ack that finds nobody leading and nothing waiting runs at once on its caller's
//! task, as without combining, and the acks that queue behind it get a leader when it ends.
//! The result is what some serial order of the calls would have given: claims are
//! handed out in claim order to the callers in arrival order (each takes at most its own
//! `max`), and an ack batch keeps each caller's items in order after the earlier callers'
//! (an ID acked twice counts in that order, as within one `ack_many`). Claimed tasks travel
//! in a [`ClaimGuard`]: a caller that went away has its share requeued, as with an uncombined
//! claim (§E0); a caller that went away before the leader took its request claims nothing.
//! A failure of the combined call is every member's failure (nothing of it was applied).
//!
//! [`Adapter::shares_writer`]: crate::Adapter::shares_writer

use std::sync::{Arc, Mutex};

use taskgate::{AckItem, Error, ResolvedOptions, Result, Task};
use tokio::sync::{oneshot, OwnedRwLockReadGuard};

use crate::broker::{ClaimGuard, SqlBroker};
use crate::core::Core;
use crate::ops::claim;

/// The most tasks one combined claim asks for, and the most items one combined ack carries:
/// requests beyond it go into the next combined call. Combining pays at small batches (one
/// turn on the writer for many callers); a batch of 100 already fills a statement, and
/// merging several of them only makes each caller wait for the others' rows.
const MAX_COMBINED: usize = 128;

/// Requests waiting for a leader, and whether one runs.
pub(crate) struct Combiner<R> {
    state: Mutex<Waiting<R>>,
}

struct Waiting<R> {
    pending: Vec<R>,
    leading: bool,
}

impl<R> Default for Combiner<R> {
    fn default() -> Self {
        Combiner { state: Mutex::new(Waiting { pending: Vec::new(), leading: false }) }
    }
}

impl<R> Combiner<R> {
    /// Queues `request`; true when no leader runs and the caller must start one.
    fn push(&self, request: R) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.pending.push(request);
        !std::mem::replace(&mut state.leading, true)
    }

    /// Requests waiting for the leader to take them.
    #[cfg(feature = "test-hooks")]
    fn waiting(&self) -> usize {
        self.state.lock().unwrap_or_else(|p| p.into_inner()).pending.len()
    }

    /// Makes the caller the leader when nobody leads and nothing waits (true): it runs its own
    /// request at once, and [`Combiner::end_inline`] hands on whatever queued meanwhile.
    fn lead_if_idle(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.leading || !state.pending.is_empty() {
            return false;
        }
        state.leading = true;
        true
    }

    /// Ends an inline leader's turn: true when requests queued meanwhile and the caller must
    /// start a leader for them (the lead stays taken), else nobody leads any more.
    fn end_inline(&self) -> bool {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        state.leading = !state.pending.is_empty();
        state.leading
    }

    /// Everything waiting, for the leader; `None` (and no leader any more) when nothing is.
    fn take(&self) -> Option<Vec<R>> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        if state.pending.is_empty() {
            state.leading = false;
            return None;
        }
        Some(std::mem::take(&mut state.pending))
    }
}

/// The combiners of one handle.
#[derive(Default)]
pub(crate) struct Combine {
    claims: Combiner<ClaimRequest>,
    acks: Combiner<AckRequest>,
}

impl Combine {
    /// Claim and ack calls waiting for their leader to take them.
    #[cfg(feature = "test-hooks")]
    pub(crate) fn waiting(&self) -> (usize, usize) {
        (self.claims.waiting(), self.acks.waiting())
    }
}

/// One caller's `dequeue_many` waiting to be combined.
pub(crate) struct ClaimRequest {
    opts: Arc<ResolvedOptions>,
    queues: Vec<String>,
    max: usize,
    answer: oneshot::Sender<Result<ClaimGuard>>,
    inflight: OwnedRwLockReadGuard<()>,
}

impl ClaimRequest {
    fn joins(&self, other: &ClaimRequest) -> bool {
        Arc::ptr_eq(&self.opts, &other.opts) && self.queues == other.queues
    }
}

/// One caller's `ack_many` (its valid items) waiting to be combined.
struct AckRequest {
    opts: Arc<ResolvedOptions>,
    items: Vec<AckItem>,
    answer: oneshot::Sender<Result<Vec<Result<()>>>>,
}

/// Claims up to `max` tasks from `queues` in a combined claim; the caller receives its share
/// (delivered through a guard that requeues it if the caller has gone).
pub(crate) async fn claim(
    broker: &SqlBroker,
    opts: Arc<ResolvedOptions>,
    queues: Vec<String>,
    max: usize,
    inflight: OwnedRwLockReadGuard<()>,
) -> Result<Vec<Task>> {
    let core = broker.core_arc();
    let (answer, receiver) = oneshot::channel();
    let request = ClaimRequest { opts, queues, max, answer, inflight };
    if broker.combine().claims.push(request) {
        let broker = broker.clone();
        tokio::spawn(async move { lead_claims(&broker).await });
    }
    let guard = receiver
        .await
        .map_err(|_| Error::backend(core.name(), "combined claim ended without a result"))?;
    Ok(guard?.take())
}

async fn lead_claims(broker: &SqlBroker) {
    while let Some(requests) = broker.combine().claims.take() {
        // A caller gone before its claim ran claims nothing.
        let mut groups: Vec<Vec<ClaimRequest>> = Vec::new();
        for request in requests.into_iter().filter(|r| !r.answer.is_closed()) {
            let open = groups.iter_mut().find(|g| {
                g.first().is_some_and(|first| first.joins(&request))
                    && g.iter().map(|r| r.max).sum::<usize>() + request.max <= MAX_COMBINED
            });
            match open {
                Some(group) => group.push(request),
                None => groups.push(vec![request]),
            }
        }
        for group in groups {
            claim_group(broker.core_arc(), group).await;
        }
    }
}

/// One claim for the whole group, shared out in claim order.
async fn claim_group(core: &Arc<Core>, group: Vec<ClaimRequest>) {
    let Some(first) = group.first() else { return };
    let opts = first.opts.clone();
    let refs: Vec<&str> = first.queues.iter().map(String::as_str).collect();
    let total: usize = group.iter().map(|r| r.max).sum();
    let result = (core.tx(&opts, "dequeue"))
        .run(&(&refs[..], total), |tx, &(refs, max)| Box::pin(claim::claim(tx, refs, max)))
        .await;
    match result {
        Ok(tasks) => {
            let mut tasks = tasks.into_iter();
            for request in group {
                let share: Vec<Task> = tasks.by_ref().take(request.max).collect();
                let guard = ClaimGuard::new(core.clone(), opts.clone(), share, request.inflight);
                // A caller gone by now gets its share back as the guard drops: it requeues.
                let _ = request.answer.send(Ok(guard));
            }
        }
        Err(e) => {
            let error = core.fail(e);
            for request in group {
                let _ = request.answer.send(Err(replicate(&error, core.name())));
            }
        }
    }
}

/// Acks `items` (valid ones) in a combined `ack_many`; returns each item's outcome.
pub(crate) async fn ack_many(
    broker: &SqlBroker,
    opts: Arc<ResolvedOptions>,
    items: Vec<AckItem>,
) -> Result<Vec<Result<()>>> {
    if broker.combine().acks.lead_if_idle() {
        // Uncontended: this caller acks its own items at once, as without combining; acks
        // that queue meanwhile get a leader when it is done (or dropped).
        let _lead = InlineAckLead(broker);
        return broker.ack_valid(&opts, &items).await;
    }
    let (answer, receiver) = oneshot::channel();
    if broker.combine().acks.push(AckRequest { opts, items, answer }) {
        let broker = broker.clone();
        tokio::spawn(async move { lead_acks(&broker).await });
    }
    receiver.await.map_err(|_| {
        Error::backend(broker.core_arc().name(), "combined ack ended without a result")
    })?
}

/// The lead an uncontended ack took; ending (or dropped with its caller) it starts a leader
/// for the acks that queued meanwhile.
struct InlineAckLead<'a>(&'a SqlBroker);

impl Drop for InlineAckLead<'_> {
    fn drop(&mut self) {
        if self.0.combine().acks.end_inline() {
            let broker = self.0.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(async move { lead_acks(&broker).await })),
                // No runtime to lead on (it is shutting down): the waiting callers' answers
                // are dropped with the requests, so they fail rather than hang.
                Err(_) => while self.0.combine().acks.take().is_some() {},
            }
        }
    }
}

async fn lead_acks(broker: &SqlBroker) {
    while let Some(requests) = broker.combine().acks.take() {
        let mut groups: Vec<Vec<AckRequest>> = Vec::new();
        for request in requests {
            match groups.iter_mut().find(|g| {
                g.first().is_some_and(|f| Arc::ptr_eq(&f.opts, &request.opts))
                    && g.iter().map(|r| r.items.len()).sum::<usize>() + request.items.len()
                        <= MAX_COMBINED
            }) {
                Some(group) => group.push(request),
                None => groups.push(vec![request]),
            }
        }
        for group in groups {
            ack_group(broker, group).await;
        }
    }
}

async fn ack_group(broker: &SqlBroker, group: Vec<AckRequest>) {
    let Some(first) = group.first() else { return };
    let opts = first.opts.clone();
    // The items move into one list; each caller keeps its answer and how many are its own.
    let mut items = Vec::with_capacity(group.iter().map(|r| r.items.len()).sum());
    let mut callers = Vec::with_capacity(group.len());
    for request in group {
        callers.push((request.answer, request.items.len()));
        items.extend(request.items);
    }
    match broker.ack_valid(&opts, &items).await {
        Ok(outcomes) => {
            let mut outcomes = outcomes.into_iter();
            for (answer, count) in callers {
                let _ = answer.send(Ok(outcomes.by_ref().take(count).collect()));
            }
        }
        Err(error) => {
            for (answer, _) in callers {
                let _ = answer.send(Err(replicate(&error, broker.core_arc().name())));
            }
        }
    }
}

/// The same failure for another member of a combined call (errors are not `Clone`): the
/// kinds a whole call fails with keep their variant; a storage error keeps its message.
fn replicate(error: &Error, backend: &'static str) -> Error {
    match error {
        Error::Closed => Error::Closed,
        Error::NotInitialized => Error::NotInitialized,
        Error::InvalidInput { field, reason } => {
            Error::InvalidInput { field, reason: reason.clone() }
        }
        Error::Backend { backend, source } => Error::backend(backend, source.to_string()),
        other => Error::backend(backend, other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_push_starts_a_leader_until_it_finds_nothing() {
        let combiner: Combiner<u32> = Combiner::default();
        assert!(combiner.push(1), "nobody leads yet");
        assert!(!combiner.push(2), "a leader runs");
        assert_eq!(combiner.take(), Some(vec![1, 2]));
        assert!(!combiner.push(3), "the leader has not finished");
        assert_eq!(combiner.take(), Some(vec![3]));
        assert_eq!(combiner.take(), None, "nothing waits: the leader stops");
        assert!(combiner.push(4), "the next caller starts a new leader");
    }

    #[test]
    fn an_inline_lead_is_taken_only_when_idle_and_hands_on_what_queued() {
        let combiner: Combiner<u32> = Combiner::default();
        assert!(combiner.lead_if_idle());
        assert!(!combiner.lead_if_idle(), "one lead at a time");
        assert!(!combiner.push(1), "a request behind an inline lead waits for it");
        assert!(combiner.end_inline(), "the inline leader must start a leader for it");
        assert_eq!(combiner.take(), Some(vec![1]));
        assert_eq!(combiner.take(), None);
        assert!(combiner.lead_if_idle());
        assert!(!combiner.end_inline(), "nothing queued: nobody leads");
        assert!(combiner.push(2), "the next caller starts a leader");
    }

    #[test]
    fn a_replicated_error_keeps_its_kind_and_message() {
        let e = Error::backend("sqlite", "disk I/O error");
        let copy = replicate(&e, "sqlite");
        assert_eq!(copy.kind(), e.kind());
        assert_eq!(copy.to_string(), e.to_string());
        assert_eq!(replicate(&Error::Closed, "sqlite").kind(), Error::Closed.kind());
    }
}
