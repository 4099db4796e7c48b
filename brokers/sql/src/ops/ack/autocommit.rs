//! The one-statement ack (PostgreSQL): where the dialect takes array parameters and nothing
//! needs the rows back (no Notify observer), [`ack_autocommit`] completes the childless items
//! in one autocommit statement — no `BEGIN`, no `COMMIT` round trip — and leaves the rest (a
//! parent to wake, a wrong token, an unknown ID) to the transaction.

use std::collections::HashSet;
use std::sync::Arc;

use taskgate::{AckItem, ResolvedOptions, Timestamp};

use crate::adapter::DbError;
use crate::core::Core;
use crate::value::{Cols, Kind, Value};

/// The comment that opens [`ack_autocommit_sql`]: it names the statement in the server's
/// activity view, and the test proxy that cuts connections finds the statement by it to cut
/// the connection where that ack commits (`test_hooks::ONE_STATEMENT_ACK`).
pub(crate) const AUTOCOMMIT_ACK_MARKER: &str = "/* taskgate: one-statement ack */";

/// True when acks under `opts` start with [`ack_autocommit`]: one-statement writes are on
/// ([`crate::ops::one_statement_writes`]) and the dialect binds arrays.
pub(crate) fn autocommits(core: &Core, opts: &ResolvedOptions) -> bool {
    crate::ops::one_statement_writes(core, opts) && core.dialect.array_params()
}

/// The most items [`ack_autocommit`] takes in one statement. Larger batches (the worker
/// runtime's completer grows its batches up to 1,000 while its flushes are busy) take the
/// transaction: measured on PostgreSQL 15 with four such flushes at once, one-statement acks of
/// ~1,000 rows ran 250–900 ms each (the transaction's `UPDATE` of the same rows: under 100 ms)
/// and the runtime's drain fell from ~40,000 to 3,000–14,000 jobs/s (benches/report-notes.md,
/// finding 18). At batch 100 and below the one statement is the faster form.
pub(crate) const AUTOCOMMIT_MAX_ITEMS: usize = 100;

/// True when `items` can go to [`ack_autocommit`]: at most [`AUTOCOMMIT_MAX_ITEMS`], every ID
/// once and every token set (the transaction keeps the order rules of a batch naming one ID
/// twice).
pub(crate) fn fits_one_statement(items: &[AckItem]) -> bool {
    let mut ids = HashSet::with_capacity(items.len());
    items.len() <= AUTOCOMMIT_MAX_ITEMS
        && items.iter().all(|item| !item.token.is_empty() && ids.insert(item.id.as_str()))
}

/// The one-statement ack ([`ack_autocommit`]): completes each `(id, token[, result])` whose
/// task is running under that token and has no child edges, at the server's time (with
/// `server_now`) or at the bound "now" (its first argument), writing the token into
/// `ack_token`; returns the IDs it completed. The `has_children = 0` test sits in the
/// WHERE clause, so a child enqueue that committed while this statement waited for the row
/// (READ COMMITTED re-checks the clause on the new row version) leaves the task to the
/// transaction, which wakes the child. Status is tested as in [`ack_unnest_sql`] (no index).
///
/// Several items come as arrays (`unnest` of ids, tokens and results). One item (`one`)
/// comes as plain arguments — now, result, id, token — and `ack_token` takes the row's old
/// `lease_token` (`SET` reads the old row), which the WHERE clause matched to the token: a
/// custom plan prices an array argument by its length and a generic plan as ten rows, so
/// PostgreSQL re-planned every one-item `unnest` ack, while the plain form keeps its generic
/// plan (benches/report-notes.md, finding 22).
pub(crate) fn ack_autocommit_sql(
    core: &Core,
    results: bool,
    server_now: bool,
    one: bool,
) -> Arc<str> {
    let key = usize::from(results) | usize::from(server_now) << 1 | usize::from(one) << 2;
    core.sql_sized("ack_autocommit", (0, key), || {
        let finished = if server_now { "(SELECT {now})" } else { "?" };
        if one {
            let result = if results { "CAST(? AS BYTEA)" } else { "NULL" };
            return format!(
                "{AUTOCOMMIT_ACK_MARKER} UPDATE {{tasks}} SET status = 'completed', \
                 finished_at = {finished}, result = {result}, lease_token = '', \
                 lease_until = 0, cancel_requested = 0, ack_token = lease_token \
                 WHERE id = ? AND status || '' = 'running' AND lease_token = ? \
                 AND has_children = 0 \
                 RETURNING id"
            );
        }
        let (result, result_arg, result_col) = if results {
            ("a.ack_result", ", CAST(? AS BYTEA[])", ", ack_result")
        } else {
            ("NULL", "", "")
        };
        format!(
            "{AUTOCOMMIT_ACK_MARKER} UPDATE {{tasks}} SET status = 'completed', \
             result = {result}, finished_at = {finished}, lease_token = '', \
             lease_until = 0, cancel_requested = 0, ack_token = a.ack_token \
             FROM unnest(CAST(? AS TEXT[]), CAST(? AS TEXT[]){result_arg}) \
             AS a(ack_id, ack_token{result_col}) \
             WHERE id = a.ack_id AND status || '' = 'running' AND lease_token = a.ack_token \
             AND has_children = 0 \
             RETURNING id"
        )
    })
}

/// Completes the childless items of `items` (see [`fits_one_statement`]) in one autocommit
/// statement, finishing them at `now` when Rust knows it ([`Core::local_now`]: an injected
/// clock) and else at the server's time, and returns the IDs it completed; the caller acks
/// the others in a transaction. The statement is the whole transaction: it wakes nobody (no task it completes has
/// children) and publishes nothing (no Notify observer). An error leaves nothing written,
/// except a lost connection ([`Dialect::is_connection_lost`](crate::Dialect)), after which
/// the statement may have been applied: the task's `ack_token` then tells.
pub(crate) async fn ack_autocommit(
    core: &Core,
    items: &[AckItem],
    now: Option<Timestamp>,
) -> std::result::Result<HashSet<String>, DbError> {
    let results = items.iter().any(|item| item.result.is_some());
    let mut args = Vec::with_capacity(4);
    args.extend(now.map(Value::from));
    let one = match items {
        [item] => {
            args.extend(item.result.clone().map(Value::Bytes));
            args.extend([Value::from(&item.id), Value::from(&item.token)]);
            true
        }
        _ => {
            args.push(Value::TextArray(items.iter().map(|item| item.id.clone()).collect()));
            args.push(Value::TextArray(items.iter().map(|item| item.token.clone()).collect()));
            if results {
                let list = items.iter().map(|item| item.result.clone()).collect();
                args.push(Value::BytesArray(list));
            }
            false
        }
    };
    let sql = ack_autocommit_sql(core, results, now.is_none(), one);
    let rows = core.adapter.write_one(&sql, &args, &[Kind::Text]).await?;
    rows.iter().map(|r| Cols(r).text(0).map_err(|e| DbError::Decode(Box::new(e)))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(n: usize) -> Vec<AckItem> {
        (0..n)
            .map(|i| AckItem { id: format!("t{i}"), token: format!("k{i}"), result: None })
            .collect()
    }

    #[test]
    fn one_statement_takes_distinct_items_with_tokens_up_to_the_cap() {
        assert!(fits_one_statement(&items(1)));
        assert!(fits_one_statement(&items(AUTOCOMMIT_MAX_ITEMS)));
        assert!(!fits_one_statement(&items(AUTOCOMMIT_MAX_ITEMS + 1)), "over the cap");
        let mut twice = items(3);
        twice[2].id = "t0".into();
        assert!(!fits_one_statement(&twice), "one ID twice");
        let mut tokenless = items(3);
        tokenless[1].token.clear();
        assert!(!fits_one_statement(&tokenless), "an empty token");
    }
}
