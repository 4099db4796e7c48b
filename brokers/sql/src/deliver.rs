//! Claim delivery: a claim runs on a task of its own and hands its tasks over through a
//! [`ClaimGuard`] (a caller that went away gets nothing, or has its tasks requeued); an empty
//! poll is one read, not a write transaction; a claim held off by this handle's other claims
//! waits for a wake-up ([`Probe::Held`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use taskgate::wake::{Look, Probe};
use taskgate::{validate, Error, QueueList, ResolvedOptions, Result, Task};
use tokio::sync::oneshot;

use crate::claimed::ClaimGuard;
use crate::combine::{self, Combine};
use crate::core::Core;
use crate::ops::claim;
use crate::tx::TxFail;

/// The queues of a claim call, validated with its batch size.
pub(crate) fn claim_args(queues: &dyn QueueList, max: usize) -> Result<Vec<String>> {
    validate::validate_claim(queues, max)?;
    Ok(queues.iter().map(str::to_owned).collect())
}

/// One claim, looking first where an empty poll should cost a read: what
/// `taskgate::wake::wait_for_work` calls for each look.
pub(crate) async fn probe_and_claim(
    core: &Arc<Core>,
    combine: &Arc<Combine>,
    opts: Arc<ResolvedOptions>,
    queues: Vec<String>,
    max: usize,
    look: Look,
) -> Result<Probe> {
    core.life.options()?;
    // Claim at once after a full batch (more is likely ready) and, where a claim that
    // finds nothing costs no more than a look (one autocommit statement that writes no
    // row), after a wake-up: one round trip less between a commit and its pickup.
    // Otherwise look first, so an empty poll is a read, not a write transaction. A claim
    // at once that finds nothing looks next, for the time of the next due task.
    //
    // A claim that gets nothing where the look saw ready work while other claims of this
    // handle on the same queues were under way was held off by them (SKIP LOCKED, or on
    // SQLite claims that took the rows after the look's snapshot): the caller waits for a
    // wake-up ([`Probe::Held`]) instead of looking again within milliseconds. With many
    // claimers on a small backlog those re-looks were most of the claim traffic (finding
    // 28).
    let full = core.last_claim_full.load(Ordering::Relaxed);
    let mut look_first = !(full || (look == Look::Woken && claim::autocommits(core)));
    let others = || core.claims_running.any(&queues);
    let mut at_once_found_none = false;
    loop {
        if look_first {
            let refs: Vec<&str> = queues.iter().map(String::as_str).collect();
            let probe = claim::probe(core, &opts, &refs).await?;
            if let Some(next_due_in) = probe.wait() {
                return Ok(Probe::Idle { next_due_in });
            }
            // The claim at once found nothing, yet the look sees ready rows: with other
            // claims of this handle on these queues under way, those hold them (or the rows
            // are new, and their wake-up reaches the waiter this call is about to be).
            if at_once_found_none && others() {
                return Ok(Probe::Held);
            }
        }
        let claimed = claim_counted(core, combine, &opts, &queues, max).await?;
        if !claimed.is_empty() {
            return Ok(Probe::Claimed(claimed));
        }
        if look_first {
            return Ok(if others() { Probe::Held } else { Probe::Claimed(claimed) });
        }
        look_first = true;
        at_once_found_none = true;
    }
}

/// One claim, counted per queue while under way ([`Core::claims_running`]). A claim that
/// failed (its transaction rolled back) wakes every waiter: rows it held are ready again, and
/// the waiters it held ([`Probe::Held`]) get no other wake-up for them.
async fn claim_counted(
    core: &Arc<Core>,
    combine: &Arc<Combine>,
    opts: &Arc<ResolvedOptions>,
    queues: &[String],
    max: usize,
) -> Result<Vec<Task>> {
    let running = core.claims_running.enter(queues);
    let claimed = claim_detached(core, combine, opts.clone(), queues.to_vec(), max).await;
    drop(running);
    if claimed.as_ref().is_err_and(|e| !matches!(e, Error::Closed)) {
        core.hub.wake();
    }
    let claimed = claimed?;
    core.last_claim_full.store(claimed.len() == max, Ordering::Relaxed);
    Ok(claimed)
}

/// One claim transaction on a spawned task (or combined with this handle's concurrent
/// claims, [`combine::applies`]), delivered through a guard that puts the tasks back to
/// `pending` if nobody receives them (extensions §E0).
async fn claim_detached(
    core: &Arc<Core>,
    combine: &Arc<Combine>,
    opts: Arc<ResolvedOptions>,
    queues: Vec<String>,
    max: usize,
) -> Result<Vec<Task>> {
    // Held until the claimed tasks are delivered or requeued; `close` waits for it.
    let inflight = core.inflight.clone().try_read_owned().map_err(|_| Error::Closed)?;
    if combine::applies(core) {
        return combine::claim(core, combine, opts, queues, max, inflight).await;
    }
    let (sender, receiver) = oneshot::channel();
    let core = core.clone();
    let name = core.name();
    tokio::spawn(async move {
        let mut sender = sender;
        let Some(result) = claim_for(&core, &opts, &queues, max, &mut sender).await else {
            return;
        };
        let result = result
            .map(|tasks| ClaimGuard::new(core.clone(), opts.clone(), tasks, inflight))
            .map_err(|e| core.fail(e));
        // If the receiver is gone the guard comes back here and is dropped: it requeues.
        let _ = sender.send(result);
    });
    let result =
        receiver.await.map_err(|_| Error::backend(name, "claim task ended without a result"))?;
    Ok(result?.take())
}

/// The claim itself, for the caller at the other end of `sender`: `None` when the caller
/// left before anything was claimed.
async fn claim_for(
    core: &Core,
    opts: &ResolvedOptions,
    queues: &[String],
    max: usize,
    sender: &mut oneshot::Sender<Result<ClaimGuard>>,
) -> Option<std::result::Result<Vec<Task>, TxFail>> {
    let refs: Vec<&str> = queues.iter().map(String::as_str).collect();
    // Room under the dialect's bound on claimed rows in flight, held until the claim's
    // transaction has ended; a caller that leaves while it waits gets nothing claimed.
    let slot = claim::claim_slot(core, max, sender).await.ok()?;
    let result = if claim::autocommits(core) {
        // One statement, its own transaction: nothing to wait for but a connection,
        // and a caller that left meanwhile gets nothing claimed.
        claim::claim_autocommit(core, opts, &refs, max, &|| sender.is_closed()).await
    } else {
        // A caller that gave up while the claim waited for a connection (the writer
        // lock, on SQLite) gets nothing claimed instead of a claim to undo.
        (core.tx(opts, "dequeue").abandon(sender))
            .run(&(&refs[..], max), |tx, &(refs, max)| Box::pin(claim::claim(tx, refs, max)))
            .await
    };
    drop(slot);
    (!matches!(result, Err(TxFail::Abandoned))).then_some(result)
}
