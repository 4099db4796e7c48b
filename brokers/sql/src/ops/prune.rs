//! Retention (extensions §E16, docs/decisions.md): one bounded batch of deletions per
//! transaction — old terminal tasks no live task depends on; key-less replay chains and keyed
//! chains whole or not at all; every candidate locked and qualified again before it goes.

use std::collections::{HashMap, HashSet};

use taskgate::{PruneRequest, Status};

use super::lock_statuses;
use crate::dialect::placeholders;
use crate::tx::{Tx, TxFail};
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
    let mut replays = Vec::new();
    if ids.len() < budget {
        replays = replay_chains(tx, req, statuses, budget - ids.len()).await?;
    }
    let taken = ids.len() + replays.iter().map(Vec::len).sum::<usize>();
    let mut chains = Vec::new();
    if req.include_keyed && taken < budget {
        chains = keyed_chains(tx, req, statuses, budget - taken).await?;
    }
    let mut all: Vec<&str> = ids
        .iter()
        .chain(replays.iter().flatten())
        .chain(chains.iter().flat_map(|(_, c)| c))
        .map(String::as_str)
        .collect();
    all.sort_unstable();
    for chunk in all.chunks(500) {
        lock_statuses(tx, chunk).await?;
    }
    let still = still_qualifying(tx, req, statuses, &all).await?;
    ids.retain(|id| still.contains(id));
    let replayed = replayed_tails(tx, &replays).await?;
    for chain in replays {
        let whole = chain.last().is_some_and(|tail| !replayed.contains(tail));
        if whole && chain.iter().all(|id| still.contains(id)) {
            ids.extend(chain);
        }
    }
    for (key, chain) in std::mem::take(&mut chains) {
        if chain.iter().all(|id| still.contains(id)) && chain_len(tx, &key).await? == chain.len() {
            ids.extend(chain);
        }
    }
    delete(tx, &ids).await?;
    Ok(u64::try_from(ids.len()).unwrap_or(u64::MAX))
}

/// Key-less tasks outside every replay chain (they replay nothing and nothing replays them).
async fn unkeyed(
    tx: &mut Tx<'_>,
    req: &PruneRequest,
    statuses: &[Status],
    limit: usize,
) -> Result<Vec<String>, TxFail> {
    let sql = tx.core.render(&format!(
        "SELECT id FROM {{tasks}} WHERE business_key = '' AND replay_of = '' AND id NOT IN \
         (SELECT replay_of FROM {{tasks}} WHERE replay_of <> '') AND {} \
         ORDER BY finished_at, id LIMIT ?",
        qualifies(statuses.len())
    ));
    let mut args = qualify_args(req, statuses);
    args.push(Value::Int(i64::try_from(limit).unwrap_or(i64::MAX)));
    texts(tx.fetch(&sql, &args, &[Kind::Text]).await?)
}

/// Whole key-less replay chains (a task and the executions replaying it, in chain order) whose
/// every execution qualifies, while they fit in `room`.
///
/// Every replay link of key-less tasks is read at once (PostgreSQL and SQLite read them from
/// the partial `uq_replay_of` index); a chain starts at a target that replays nothing stored.
async fn replay_chains(
    tx: &mut Tx<'_>,
    req: &PruneRequest,
    statuses: &[Status],
    mut room: usize,
) -> Result<Vec<Vec<String>>, TxFail> {
    let sql = tx
        .core
        .sql("SELECT id, replay_of FROM {tasks} WHERE business_key = '' AND replay_of <> ''");
    let links = tx.fetch(&sql, &[], &[Kind::Text, Kind::Text]).await?;
    if links.is_empty() {
        return Ok(Vec::new());
    }
    let mut replay_of_target: HashMap<String, String> = HashMap::with_capacity(links.len());
    for row in &links {
        let c = Cols(row);
        replay_of_target.insert(c.text(1)?, c.text(0)?);
    }
    let replays: HashSet<&str> = replay_of_target.values().map(String::as_str).collect();
    let mut roots: Vec<&str> =
        replay_of_target.keys().map(String::as_str).filter(|t| !replays.contains(t)).collect();
    roots.sort_unstable();
    let mut stored_roots = HashSet::new();
    for chunk in roots.chunks(500) {
        let sql = tx.core.render(&format!(
            "SELECT id FROM {{tasks}} WHERE business_key = '' AND id IN ({})",
            placeholders(chunk.len())
        ));
        let args: Vec<Value> = chunk.iter().map(|id| Value::from(*id)).collect();
        stored_roots.extend(texts(tx.fetch(&sql, &args, &[Kind::Text]).await?)?);
    }
    let mut chains = Vec::new();
    for root in roots {
        // A replay whose target is gone (stored before replay chains went whole) starts it.
        let mut chain: Vec<String> = Vec::new();
        if stored_roots.contains(root) {
            chain.push(root.to_owned());
        }
        let mut last = root;
        while let Some(next) = replay_of_target.get(last) {
            chain.push(next.clone());
            last = next;
        }
        chains.push(chain);
    }
    let members: Vec<&str> = chains.iter().flatten().map(String::as_str).collect();
    let qualifying = still_qualifying(tx, req, statuses, &members).await?;
    let mut fitting = Vec::new();
    for chain in chains {
        if chain.len() <= room && chain.iter().all(|id| qualifying.contains(id)) {
            room -= chain.len();
            fitting.push(chain);
        }
    }
    Ok(fitting)
}

/// The tails of `chains` (locked by the caller) that some execution replays by now: a replay
/// committed since the chains were read makes its chain longer, so it may not go.
async fn replayed_tails(
    tx: &mut Tx<'_>,
    chains: &[Vec<String>],
) -> Result<HashSet<String>, TxFail> {
    let tails: Vec<&str> = chains.iter().filter_map(|c| c.last()).map(String::as_str).collect();
    let mut replayed = HashSet::new();
    for chunk in tails.chunks(500) {
        let sql = tx.core.render(&format!(
            "SELECT replay_of FROM {{tasks}} WHERE replay_of IN ({})",
            placeholders(chunk.len())
        ));
        let args: Vec<Value> = chunk.iter().map(|id| Value::from(*id)).collect();
        replayed.extend(texts(tx.fetch(&sql, &args, &[Kind::Text]).await?)?);
    }
    Ok(replayed)
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
