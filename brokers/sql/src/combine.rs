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
//! runs them as one call — and once that call's transaction has its turn on the writer, takes
//! in the requests that queued while it waited (those that fit under the cap) — answers each
//! caller with its share, and goes on while requests keep arriving; an ack that finds nobody leading and nothing waiting runs at once on its caller's
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

use crate::claimed::ClaimGuard;
use crate::core::Core;
use crate::ops::ack::{self, choose};
use crate::ops::claim;
use crate::resolve;

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

/// What a leader does with a request that waited while its call waited for the writer.
enum Take {
    /// Joins the call.
    Join,
    /// Waits for the leader's next round.
    Keep,
    /// Is dropped: its caller has gone (a claim; it claims nothing).
    Drop,
}

impl<R> Combiner<R> {
    /// Takes the waiting requests `sort` lets join a call, in arrival order; the kept ones
    /// wait for the leader's next round.
    fn take_joining(&self, mut sort: impl FnMut(&R) -> Take) -> Vec<R> {
        let mut state = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let mut keep = Vec::new();
        let mut joined = Vec::new();
        for request in state.pending.drain(..) {
            match sort(&request) {
                Take::Join => joined.push(request),
                Take::Keep => keep.push(request),
                Take::Drop => {}
            }
        }
        state.pending = keep;
        joined
    }
}

/// True when concurrent claims and acks of this handle are combined: the adapter shares one
/// writer, and no test hook waits for each call's own commit.
pub(crate) fn applies(core: &Core) -> bool {
    core.adapter.shares_writer() && !core.has_before_commit_hook()
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
    core: &Arc<Core>,
    combine: &Arc<Combine>,
    opts: Arc<ResolvedOptions>,
    queues: Vec<String>,
    max: usize,
    inflight: OwnedRwLockReadGuard<()>,
) -> Result<Vec<Task>> {
    let (answer, receiver) = oneshot::channel();
    let request = ClaimRequest { opts, queues, max, answer, inflight };
    if combine.claims.push(request) {
        let leader = Leader { core: core.clone(), combine: combine.clone() };
        tokio::spawn(async move { lead_claims(&leader).await });
    }
    let guard = receiver
        .await
        .map_err(|_| Error::backend(core.name(), "combined claim ended without a result"))?;
    Ok(guard?.take())
}

/// What a leader runs on: the handle's core and combiners.
#[derive(Clone)]
struct Leader {
    core: Arc<Core>,
    combine: Arc<Combine>,
}

async fn lead_claims(leader: &Leader) {
    while let Some(requests) = leader.combine.claims.take() {
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
            claim_group(leader, group).await;
        }
    }
}

/// One claim for the whole group, shared out in claim order. Once the claim's transaction
/// has its turn on the writer it takes in the claims that queued meanwhile (so the callers
/// that arrived while the leader waited for the writer ride along) and the acks waiting for
/// their leader (run first, in the same transaction: one turn on the writer for both).
async fn claim_group(leader: &Leader, group: Vec<ClaimRequest>) {
    let core = &leader.core;
    let Some(first) = group.first() else { return };
    let opts = first.opts.clone();
    let queues = first.queues.clone();
    let refs: Vec<&str> = queues.iter().map(String::as_str).collect();
    let group = Mutex::new(group);
    let riding = tokio::sync::Mutex::new(Riding::default());
    let late = Late::sources(core, &leader.combine, &opts);
    let mut unknown = Vec::new();
    let result = (core.tx(&opts, "dequeue").settle(&mut unknown))
        .run(&(&refs[..], &group, &riding, &late), |tx, &(refs, group, riding, late)| {
            Box::pin(async move {
                let total = late.claims_joining(group);
                let mut riding = riding.lock().await;
                late.acks_riding(&mut riding);
                let acked = match riding.items.is_empty() {
                    true => None,
                    false => Some(ack::ack_many(tx, &riding.items, late.returning).await?),
                };
                // Every caller of the group may have left while it waited for the writer.
                let tasks = match total {
                    0 => Vec::new(),
                    _ => claim::claim(tx, refs, total).await?,
                };
                Ok((acked, tasks))
            })
        })
        .await;
    let group = group.into_inner().unwrap_or_else(|p| p.into_inner());
    let riding = riding.into_inner();
    // The riding acks settle as a lone ack transaction would (the same attempts).
    let ack_unknown = || {
        (unknown.into_iter())
            .map(|((acked, _), snapshots, wakes)| (acked.unwrap_or_default(), snapshots, wakes))
            .collect::<Vec<_>>()
    };
    match result {
        Ok((acked, tasks)) => {
            let mut tasks = tasks.into_iter();
            for request in group {
                let share: Vec<Task> = tasks.by_ref().take(request.max).collect();
                let guard = ClaimGuard::new(core.clone(), opts.clone(), share, request.inflight);
                // A caller gone by now gets its share back as the guard drops: it requeues.
                let _ = request.answer.send(Ok(guard));
            }
            if !riding.items.is_empty() {
                let done = Ok(acked.unwrap_or_default());
                let earlier = core.unresolved.take_acks(&riding.items);
                let settled =
                    resolve::settle_acks(core, &opts, &riding.items, earlier, ack_unknown(), done)
                        .await;
                riding.answer(settled, core.name());
            }
        }
        Err(e) => {
            let error = match riding.items.is_empty() {
                true => core.fail(e),
                false => {
                    let earlier = core.unresolved.take_acks(&riding.items);
                    let settled = resolve::settle_acks(
                        core,
                        &opts,
                        &riding.items,
                        earlier,
                        ack_unknown(),
                        Err(e),
                    );
                    settled
                        .await
                        .err()
                        .unwrap_or_else(|| Error::backend(core.name(), "claim failed"))
                }
            };
            for request in group {
                let _ = request.answer.send(Err(replicate(&error, core.name())));
            }
            riding.answer(Err(error), core.name());
        }
    }
}

/// The acks riding along in a combined claim's transaction, with their callers.
#[derive(Default)]
struct Riding {
    items: Vec<AckItem>,
    /// Each caller's answer and how many of the items are its own, in order.
    callers: Vec<(Answer, usize)>,
}

/// How a combined ack answers one caller.
type Answer = oneshot::Sender<Result<Vec<Result<()>>>>;

impl Riding {
    /// Answers every caller with its share of `outcomes`.
    fn answer(self, outcomes: Result<Vec<Result<()>>>, backend: &'static str) {
        match outcomes {
            Ok(outcomes) => {
                let mut outcomes = outcomes.into_iter();
                for (answer, count) in self.callers {
                    let _ = answer.send(Ok(outcomes.by_ref().take(count).collect()));
                }
            }
            Err(error) => {
                for (answer, _) in self.callers {
                    let _ = answer.send(Err(replicate(&error, backend)));
                }
            }
        }
    }
}

/// Where a combined call's transaction takes the requests that queued while it waited.
struct Late<'b> {
    combine: &'b Combine,
    opts: &'b Arc<ResolvedOptions>,
    /// The most items one ack statement carries here.
    ack_limit: usize,
    /// The one-statement ack form applies.
    returning: bool,
}

impl<'b> Late<'b> {
    fn sources(core: &Core, combine: &'b Combine, opts: &'b Arc<ResolvedOptions>) -> Late<'b> {
        Late {
            combine,
            opts,
            ack_limit: MAX_COMBINED.min(ack::chunk_size(core)),
            returning: ack::returning_form(core),
        }
    }

    /// Moves the waiting claims that join `group` (same options and queues, room under
    /// [`MAX_COMBINED`]) into it, in arrival order, dropping those whose caller has gone (in
    /// the group already too: its transaction may have waited long for the writer); returns
    /// the group's total batch size.
    fn claims_joining(&self, group: &Mutex<Vec<ClaimRequest>>) -> usize {
        let mut group = group.lock().unwrap_or_else(|p| p.into_inner());
        group.retain(|r| !r.answer.is_closed());
        let mut total: usize = group.iter().map(|r| r.max).sum();
        let mut full = false;
        let joined = match group.first() {
            Some(first) => self.combine.claims.take_joining(|r| {
                if r.answer.is_closed() {
                    Take::Drop
                } else if first.joins(r) && total + r.max <= MAX_COMBINED && !full {
                    total += r.max;
                    Take::Join
                } else {
                    // Room is short: later requests wait too, in arrival order.
                    full |= first.joins(r);
                    Take::Keep
                }
            }),
            None => Vec::new(),
        };
        group.extend(joined);
        total
    }

    /// Moves the waiting acks of the same options into `riding`, in arrival order, while
    /// they fit under the ack limit.
    fn acks_riding(&self, riding: &mut Riding) {
        let mut room = self.ack_limit.saturating_sub(riding.items.len());
        let joined = self.combine.acks.take_joining(|r| {
            if Arc::ptr_eq(&r.opts, self.opts) && r.items.len() <= room {
                room -= r.items.len();
                Take::Join
            } else {
                // Room is short: later acks wait too, in arrival order.
                room = 0;
                Take::Keep
            }
        });
        for request in joined {
            riding.callers.push((request.answer, request.items.len()));
            riding.items.extend(request.items);
        }
    }
}

/// Acks `items` (valid ones) in a combined `ack_many`; returns each item's outcome.
pub(crate) async fn ack_many(
    core: &Arc<Core>,
    combine: &Arc<Combine>,
    opts: Arc<ResolvedOptions>,
    items: Vec<AckItem>,
) -> Result<Vec<Result<()>>> {
    let leader = Leader { core: core.clone(), combine: combine.clone() };
    if combine.acks.lead_if_idle() {
        // Uncontended: this caller acks its own items at once, as without combining; acks
        // that queue meanwhile get a leader when it is done (or dropped).
        let _lead = InlineAckLead(leader);
        return choose::ack_valid(core, &opts, &items).await;
    }
    let (answer, receiver) = oneshot::channel();
    if combine.acks.push(AckRequest { opts, items, answer }) {
        tokio::spawn(async move { lead_acks(&leader).await });
    }
    receiver
        .await
        .map_err(|_| Error::backend(core.name(), "combined ack ended without a result"))?
}

/// The lead an uncontended ack took; ending (or dropped with its caller) it starts a leader
/// for the acks that queued meanwhile.
struct InlineAckLead(Leader);

impl Drop for InlineAckLead {
    fn drop(&mut self) {
        if self.0.combine.acks.end_inline() {
            let leader = self.0.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn(async move { lead_acks(&leader).await })),
                // No runtime to lead on (it is shutting down): the waiting callers' answers
                // are dropped with the requests, so they fail rather than hang.
                Err(_) => while self.0.combine.acks.take().is_some() {},
            }
        }
    }
}

async fn lead_acks(leader: &Leader) {
    while let Some(requests) = leader.combine.acks.take() {
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
            ack_group(leader, group).await;
        }
    }
}

async fn ack_group(leader: &Leader, group: Vec<AckRequest>) {
    let Some(first) = group.first() else { return };
    let opts = first.opts.clone();
    let core = &leader.core;
    // The items move into one list; each caller keeps its answer and how many are its own.
    let mut riding = Riding::default();
    for request in group {
        riding.callers.push((request.answer, request.items.len()));
        riding.items.extend(request.items);
    }
    let late = Late::sources(core, &leader.combine, &opts);
    if riding.items.len() >= late.ack_limit {
        let result = choose::ack_valid(core, &opts, &riding.items).await;
        riding.answer(result, core.name());
        return;
    }
    // One transaction, which takes in the acks queued meanwhile once it has the writer.
    let riding = tokio::sync::Mutex::new(riding);
    let mut unknown = Vec::new();
    let done = (core.tx(&opts, "ack").settle(&mut unknown))
        .run(&(&riding, &late), |tx, &(riding, late)| {
            Box::pin(async move {
                let mut riding = riding.lock().await;
                late.acks_riding(&mut riding);
                ack::ack_many(tx, &riding.items, late.returning).await
            })
        })
        .await;
    let riding = riding.into_inner();
    let earlier = core.unresolved.take_acks(&riding.items);
    let result = resolve::settle_acks(core, &opts, &riding.items, earlier, unknown, done).await;
    riding.answer(result, core.name());
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
    fn a_late_take_joins_keeps_and_drops_in_arrival_order() {
        let combiner: Combiner<u32> = Combiner::default();
        assert!(combiner.push(1));
        assert_eq!(combiner.take(), Some(vec![1]), "the leader took the first round");
        for n in [2, 3, 4, 5, 6] {
            assert!(!combiner.push(n), "the leader still runs");
        }
        let joined = combiner.take_joining(|n| match n {
            3 => Take::Drop,
            n if n % 2 == 0 => Take::Join,
            _ => Take::Keep,
        });
        assert_eq!(joined, vec![2, 4, 6]);
        assert_eq!(combiner.take(), Some(vec![5]), "kept for the next round, 3 dropped");
        assert_eq!(combiner.take(), None);
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
