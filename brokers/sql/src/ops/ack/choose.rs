//! Which form acks a call's items: where one-statement acks apply ([`autocommits`]), a
//! chunk's childless items are completed first by one autocommit statement; the rest (and
//! all of a chunk that statement could not take) run in one transaction, whose lost outcome
//! is settled by `resolve.rs`.

use std::collections::HashSet;

use taskgate::{validate, AckItem, Error, ResolvedOptions, Result};

use super::autocommit::{ack_autocommit, autocommits, fits_one_statement};
use super::{ack_many, chunk_size, returning_form};
use crate::core::Core;
use crate::resolve;
use crate::unresolved::LostAck;

/// Acks validated `items` in chunks; each item's outcome in order. Where [`autocommits`], a
/// chunk's childless items are completed first by one autocommit statement; the rest (and all
/// of a chunk that statement could not take) run in one transaction.
pub(crate) async fn ack_valid(
    core: &Core,
    opts: &ResolvedOptions,
    valid: &[AckItem],
) -> Result<Vec<Result<()>>> {
    let mut results = Vec::with_capacity(valid.len());
    let autocommits = autocommits(core, opts);
    for chunk in valid.chunks(chunk_size(core)) {
        // What an earlier call of this handle, whose outcome is unknown, wrote per item.
        let earlier = core.unresolved.take_acks(chunk);
        if autocommits && fits_one_statement(chunk) {
            results.extend(ack_autocommit_first(core, opts, chunk, earlier).await?);
        } else {
            results.extend(ack_in_tx(core, opts, chunk, earlier).await?);
        }
    }
    Ok(results)
}

/// Acks `chunk` by one autocommit statement, then the items it did not complete in one
/// transaction; each item's outcome in order.
async fn ack_autocommit_first(
    core: &Core,
    opts: &ResolvedOptions,
    chunk: &[AckItem],
    mut earlier: Vec<LostAck>,
) -> Result<Vec<Result<()>>> {
    let acked = match ack_autocommit(core, chunk, core.local_now(opts)).await {
        Ok(acked) => acked,
        Err(e) => {
            // Nothing written, or (connection lost) maybe all of it: the transaction acks
            // what is left, and `ack_token` tells the lost statement's work.
            if core.maybe_applied(&e) {
                earlier.iter_mut().for_each(|lost| lost.autocommit = true);
            }
            HashSet::new()
        }
    };
    let (mut rest, mut rest_earlier) = (Vec::new(), Vec::new());
    for (item, lost) in chunk.iter().zip(earlier) {
        if !acked.contains(&item.id) {
            rest.push(item.clone());
            rest_earlier.push(lost);
        }
    }
    let mut rest_outcomes = match rest.is_empty() {
        true => Vec::new(),
        false => ack_in_tx(core, opts, &rest, rest_earlier).await?,
    }
    .into_iter();
    let outcome = |item: &AckItem| match acked.contains(&item.id) {
        true => Ok(()),
        false => rest_outcomes
            .next()
            .unwrap_or_else(|| Err(Error::backend(core.name(), "an ack item got no outcome"))),
    };
    Ok(chunk.iter().map(outcome).collect())
}

/// Acks `chunk` in one transaction (settling lost COMMITs, [`resolve::settle_acks`]).
async fn ack_in_tx(
    core: &Core,
    opts: &ResolvedOptions,
    chunk: &[AckItem],
    earlier: Vec<LostAck>,
) -> Result<Vec<Result<()>>> {
    let returning = returning_form(core);
    let mut unknown = Vec::new();
    let lost = earlier.iter().any(|lost| !lost.is_empty());
    let done = (core.tx(opts, "ack").settle(&mut unknown).after_lost(lost))
        .run(&(chunk, returning), |tx, &(chunk, returning)| {
            Box::pin(ack_many(tx, chunk, returning))
        })
        .await;
    resolve::settle_acks(core, opts, chunk, earlier, unknown, done).await
}

/// `item`, with a token holding a NUL replaced by the empty token: no lease token holds one
/// (contract §E7.3), so it is answered as any token that is not the current one (`LeaseLost`,
/// or `NotFound` for an unknown ID) without being sent to a server whose text cannot carry it.
pub(crate) fn no_nul_token(item: &AckItem) -> AckItem {
    let mut item = item.clone();
    if validate::has_nul(&item.token) {
        item.token.clear();
    }
    item
}
