//! Which form stores an enqueue call's tasks, and what its failure means to the caller: a plain
//! task alone whose ID the broker generates is tried as one autocommit statement where
//! one-statement writes apply; everything else (and such a task after a statement that lost
//! its answer) is one transaction under IDs chosen before its first attempt, whose lost outcome
//! is settled by `resolve.rs`. Unique violations become `TaskExists`.

use taskgate::{Error, ExistingTask, ResolvedOptions, Result, Task};

use super::{assign_ids, enqueue_autocommit, enqueue_many, fits_one_statement};
use super::{lost_one_statement, KEY_TAIL_SQL};
use crate::core::Core;
use crate::dialect::UniqueTarget;
use crate::ops::{id_status, one_statement_writes};
use crate::resolve;
use crate::tx::TxFail;
use crate::value::Kind;

/// Stores validated `tasks`; the stored tasks in order.
pub(crate) async fn enqueue_valid(
    core: &Core,
    opts: &ResolvedOptions,
    tasks: &[Task],
) -> Result<Vec<Task>> {
    // The IDs are chosen once: every attempt stores the same rows under them. A call that
    // repeats one this handle could not settle takes that call's IDs and lost attempts.
    let (ids, mut unknown) = match core.unresolved.take_enqueue(tasks) {
        Some(earlier) => (earlier.ids, earlier.attempts),
        None => (assign_ids(tasks), Vec::new()),
    };
    if let ([task], [id], true) = (tasks, &ids[..], unknown.is_empty()) {
        if fits_one_statement(task) && one_statement_writes(core, opts) {
            let now = core.local_now(opts);
            match enqueue_autocommit(core, task, id, now).await {
                Ok(stored) => return Ok(vec![stored]),
                // Nothing written, or (connection lost) maybe the row: the transaction
                // runs next under the same ID, and a row found there settles it.
                Err(e) if core.maybe_applied(&e) => {
                    unknown.push(lost_one_statement(task, id, now));
                }
                Err(_) => {}
            }
        }
    }
    let done = (core.tx(opts, "enqueue_many").settle(&mut unknown))
        .run(&(tasks, &ids[..]), |tx, &(tasks, ids)| Box::pin(enqueue_many(tx, tasks, ids)))
        .await;
    let done = match done {
        Err(e) if !unknown.is_empty() => {
            resolve::settle_enqueue(core, opts, tasks, ids, unknown, e).await
        }
        done => done,
    };
    // A batch of one (what `enqueue` sends) knows which task hit a unique index.
    let single = if tasks.len() == 1 { tasks.first() } else { None };
    match done {
        Ok(stored) => Ok(stored),
        Err(e) => Err(enqueue_error(core, e, single).await),
    }
}

/// Translates an enqueue failure: unique violations become `TaskExists` (with the key's
/// tail, re-read outside the failed transaction, when the chain-head index fired).
pub(crate) async fn enqueue_error(core: &Core, e: TxFail, task: Option<&Task>) -> Error {
    let TxFail::Db(db) = e else { return core.fail(e) };
    let Some(target) = core.dialect.unique_violation(&db, &core.prefix) else {
        return core.backend_error(db);
    };
    let id = task.map(|t| t.id.clone()).unwrap_or_default();
    let key = task.map(|t| t.business_key.as_str()).unwrap_or_default();
    match target {
        UniqueTarget::ChainHead | UniqueTarget::Unnamed if !key.is_empty() => {
            let existing = tail_outside(core, key).await;
            Error::TaskExists { id: String::new(), existing }
        }
        _ => Error::TaskExists { id, existing: None },
    }
}

/// The chain tail of `key`, read outside any transaction.
async fn tail_outside(core: &Core, key: &str) -> Option<ExistingTask> {
    let sql = core.sql(KEY_TAIL_SQL);
    let kinds = [Kind::Text, Kind::Text];
    let rows = core.adapter.read(&sql, &[key.into()], &kinds).await.ok()?;
    let (execution_id, status) = id_status(rows.first()?).ok()?;
    Some(ExistingTask { business_key: key.to_owned(), execution_id, status })
}
