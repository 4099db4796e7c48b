//! Retention (extensions §E16, docs/decisions.md): one bounded batch of deletions per
//! transaction — old terminal tasks no live task depends on; keyed chains whole or not at all;
//! every candidate locked and qualified again before it goes.

use std::collections::HashSet;

use taskgate::{PruneRequest, Status};

use super::lock_statuses;
use crate::core::{Tx, TxFail};
use crate::dialect::placeholders;
use crate::value::Cols;
use crate::{Kind, Value};

/// Most tasks one prune transaction deletes.
pub(crate) const PRUNE_BATCH: usize = 1_000;

/// The qualifying condition: terminal status in the list, finished before the cutoff, and no
/// non-terminal task depends on it. Arguments: the statuses, then the cutoff.
fn qualifies(statuses: usize) -> String {
    format!(
        "status IN ({}) AND finished_at > 0 AND finished_at < ? AND NOT EXISTS (SELECT 1 FROM \
         {{deps}} d JOIN {{tasks}} c ON c.id = d.child_id WHERE d.parent_id = {{tasks}}.id AND \
         c.status IN ('blocked', 'pending', 'running', 'retrying'))",
        placeholders(statuses)
    )
}

fn qualify_args(req: &PruneRequest, statuses: &[Status]) -> Vec<Value> {
    let mut args: Vec<Value> = statuses.iter().map(|s| Value::from(s.as_str())).collect();
    args.push(Value::from(req.finished_before));
    args
}

/// Deletes up to `budget` (≤ [`PRUNE_BATCH`]) qualifying tasks; returns how many went.
///
/// Candidates are found without locks, then locked (in ID order, waiting like every writer)
/// and qualified again by a new statement: under READ COMMITTED a statement that waited for a
/// row lock keeps its old snapshot of every other row, so the first read cannot see a child
/// whose enqueue held a candidate's lock (§5.2) and committed meanwhile — the re-check can.
pub(crate) async fn prune_batch(
    tx: &mut Tx<'_>,
    req: &PruneRequest,
    statuses: &[Status],
    budget: usize,
    first: bool,
) -> Result<u64, TxFail> {
    if first {
        drop_old_quota_windows(tx).await?;
    }
    let budget = budget.min(PRUNE_BATCH);
    let mut ids = unkeyed(tx, req, statuses, budget).await?;
    let mut chains = Vec::new();
    if req.include_keyed && ids.len() < budget {
        chains = keyed_chains(tx, req, statuses, budget - ids.len()).await?;
    }
    let mut all: Vec<&str> =
        ids.iter().chain(chains.iter().flat_map(|(_, c)| c)).map(String::as_str).collect();
    all.sort_unstable();
    for chunk in all.chunks(500) {
        lock_statuses(tx, chunk).await?;
    }
    let still = still_qualifying(tx, req, statuses, &all).await?;
    ids.retain(|id| still.contains(id));
    for (key, chain) in std::mem::take(&mut chains) {
        if chain.iter().all(|id| still.contains(id)) && chain_len(tx, &key).await? == chain.len() {
            ids.extend(chain);
        }
    }
    delete(tx, &ids).await?;
    Ok(u64::try_from(ids.len()).unwrap_or(u64::MAX))
}

async fn unkeyed(
    tx: &mut Tx<'_>,
    req: &PruneRequest,
    statuses: &[Status],
    limit: usize,
) -> Result<Vec<String>, TxFail> {
    let sql = tx.core.render(&format!(
        "SELECT id FROM {{tasks}} WHERE business_key = '' AND {} ORDER BY finished_at, id LIMIT ?",
        qualifies(statuses.len())
    ));
    let mut args = qualify_args(req, statuses);
    args.push(Value::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
    texts(tx.fetch(&sql, &args, &[Kind::Text]).await?)
}

/// Whole chains `(key, ids)` whose every execution qualifies, while they fit in `room`.
async fn keyed_chains(
    tx: &mut Tx<'_>,
    req: &PruneRequest,
    statuses: &[Status],
    mut room: usize,
) -> Result<Vec<(String, Vec<String>)>, TxFail> {
    let cond = qualifies(statuses.len());
    let keys_sql = tx.core.render(&format!(
        "SELECT DISTINCT business_key FROM {{tasks}} WHERE business_key <> '' AND {cond}"
    ));
    let mut keys = texts(tx.fetch(&keys_sql, &qualify_args(req, statuses), &[Kind::Text]).await?)?;
    keys.sort_unstable();
    let chain_sql = tx.core.render(&format!(
        "SELECT id FROM {{tasks}} WHERE business_key = ? AND business_key <> '' AND {cond}"
    ));
    let mut chains = Vec::new();
    for key in keys {
        let mut args = vec![Value::from(&key)];
        args.extend(qualify_args(req, statuses));
        let chain = texts(tx.fetch(&chain_sql, &args, &[Kind::Text]).await?)?;
        if chain.len() <= room && chain_len(tx, &key).await? == chain.len() {
            room -= chain.len();
            chains.push((key, chain));
        }
    }
    Ok(chains)
}

/// How many executions `key` has.
async fn chain_len(tx: &mut Tx<'_>, key: &str) -> Result<usize, TxFail> {
    let sql =
        tx.core.sql("SELECT COUNT(*) FROM {tasks} WHERE business_key = ? AND business_key <> ''");
    let all = tx.fetch(&sql, &[Value::from(key)], &[Kind::Int]).await?;
    let n = Cols(all.first().map(Vec::as_slice).unwrap_or_default()).int(0)?;
    Ok(usize::try_from(n).unwrap_or(usize::MAX))
}

/// Which of `ids` (locked by the caller) still qualify, read by a statement of its own.
async fn still_qualifying(
    tx: &mut Tx<'_>,
    req: &PruneRequest,
    statuses: &[Status],
    ids: &[&str],
) -> Result<HashSet<String>, TxFail> {
    let mut still = HashSet::with_capacity(ids.len());
    for chunk in ids.chunks(500) {
        let sql = tx.core.render(&format!(
            "SELECT id FROM {{tasks}} WHERE id IN ({}) AND {}",
            placeholders(chunk.len()),
            qualifies(statuses.len())
        ));
        let mut args: Vec<Value> = chunk.iter().map(|id| Value::from(*id)).collect();
        args.extend(qualify_args(req, statuses));
        still.extend(texts(tx.fetch(&sql, &args, &[Kind::Text]).await?)?);
    }
    Ok(still)
}

async fn delete(tx: &mut Tx<'_>, ids: &[String]) -> Result<(), TxFail> {
    for chunk in ids.chunks(500) {
        let list = placeholders(chunk.len());
        let args: Vec<Value> = chunk.iter().map(Value::from).collect();
        let deps = tx.core.render(&format!(
            "DELETE FROM {{deps}} WHERE child_id IN ({list}) OR parent_id IN ({list})"
        ));
        let both: Vec<Value> = args.iter().chain(&args).cloned().collect();
        tx.exec(&deps, &both).await?;
        let tasks = tx.core.render(&format!("DELETE FROM {{tasks}} WHERE id IN ({list})"));
        tx.exec(&tasks, &args).await?;
    }
    Ok(())
}

/// Removes quota windows that ended more than one period ago.
async fn drop_old_quota_windows(tx: &mut Tx<'_>) -> Result<(), TxFail> {
    let now_secs = tx.now().await?.as_secs();
    let sql = tx.core.sql("DELETE FROM {quota} WHERE period > 0 AND win + 2 * period < ?");
    tx.exec(&sql, &[Value::Int(now_secs)]).await?;
    Ok(())
}

fn texts(rows: Vec<crate::Row>) -> Result<Vec<String>, TxFail> {
    rows.iter().map(|r| Cols(r).text(0).map_err(TxFail::from)).collect()
}
