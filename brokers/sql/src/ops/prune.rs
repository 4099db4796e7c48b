//! Retention (extensions §E16, docs/decisions.md): one bounded batch of deletions per
//! transaction — old terminal tasks no live task depends on; keyed chains whole or not at all.

use taskgate::{PruneRequest, Status};

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
    if req.include_keyed && ids.len() < budget {
        let room = budget - ids.len();
        ids.extend(keyed_chains(tx, req, statuses, room).await?);
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

/// Whole chains whose every execution qualifies, while they fit in `room`.
async fn keyed_chains(
    tx: &mut Tx<'_>,
    req: &PruneRequest,
    statuses: &[Status],
    mut room: usize,
) -> Result<Vec<String>, TxFail> {
    let cond = qualifies(statuses.len());
    let keys_sql = tx.core.render(&format!(
        "SELECT DISTINCT business_key FROM {{tasks}} WHERE business_key <> '' AND {cond}"
    ));
    let mut keys = texts(tx.fetch(&keys_sql, &qualify_args(req, statuses), &[Kind::Text]).await?)?;
    keys.sort_unstable();
    let chain_sql =
        tx.core.render(&format!("SELECT id FROM {{tasks}} WHERE business_key = ? AND {cond}"));
    let all_sql = tx.core.sql("SELECT COUNT(*) FROM {tasks} WHERE business_key = ?");
    let mut ids = Vec::new();
    for key in keys {
        let mut args = vec![Value::from(&key)];
        args.extend(qualify_args(req, statuses));
        let chain = texts(tx.fetch(&chain_sql, &args, &[Kind::Text]).await?)?;
        let all = tx.fetch(&all_sql, &[Value::from(&key)], &[Kind::Int]).await?;
        let total = Cols(all.first().map(Vec::as_slice).unwrap_or_default()).int(0)?;
        let whole = i64::try_from(chain.len()).is_ok_and(|n| n == total);
        if whole && chain.len() <= room {
            room -= chain.len();
            ids.extend(chain);
        }
    }
    Ok(ids)
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
