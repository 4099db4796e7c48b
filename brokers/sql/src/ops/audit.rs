//! Audited operator actions (extensions §E13): the action and its audit row in one write
//! transaction; a rejected action's row alone in a transaction of its own; the log read.

use taskgate::audit::record_for;
use taskgate::{AdminAction, AdminOutcome, AuditQuery, AuditRecord, Error, Result, Timestamp};

use crate::core::Core;
use crate::ops::{finish, replay};
use crate::tx::{Tx, TxFail};
use crate::value::{Cols, DecodeError};
use crate::{Kind, Value};

/// Runs `action` and writes its `ok` record in the same transaction.
pub(crate) async fn audited(
    tx: &mut Tx<'_>,
    actor: &str,
    action: &AdminAction,
) -> Result<AdminOutcome, TxFail> {
    let outcome = match action {
        AdminAction::Cancel { id } => {
            finish::cancel(tx, id).await?;
            AdminOutcome::Done
        }
        AdminAction::Resume { id } => AdminOutcome::Task(Box::new(replay::resume(tx, id).await?)),
        AdminAction::Replay(request) => {
            AdminOutcome::Task(Box::new(replay::replay(tx, request).await?))
        }
        AdminAction::PauseQueue { queue } => {
            finish::pause_queue(tx, queue).await?;
            AdminOutcome::Done
        }
        AdminAction::ResumeQueue { queue } => {
            finish::resume_queue(tx, queue).await?;
            AdminOutcome::Done
        }
    };
    // Read after the action's writes, under its locks: the records of concurrent actions on
    // one task (or queue) are in the order their changes committed.
    let now = tx.now_after_writes().await?;
    insert(tx, &record_for(actor, action, now, Ok(&outcome))).await?;
    Ok(outcome)
}

/// Writes the record of an action the contract rejected (nothing else changes).
pub(crate) async fn rejected(
    tx: &mut Tx<'_>,
    actor: &str,
    action: &AdminAction,
    error: &Error,
) -> Result<(), TxFail> {
    let now = tx.now().await?;
    insert(tx, &record_for(actor, action, now, Err(error))).await
}

async fn insert(tx: &mut Tx<'_>, record: &AuditRecord) -> Result<(), TxFail> {
    let sql = tx.core.sql(
        "INSERT INTO {audit} (id, at_ms, actor, action_name, target, outcome, detail) \
         VALUES (?, ?, ?, ?, ?, ?, ?)",
    );
    let args = [
        Value::from(&record.id),
        Value::from(record.at),
        Value::from(&record.actor),
        Value::from(&record.action),
        Value::from(&record.target),
        Value::from(&record.outcome),
        Value::from(&record.detail),
    ];
    tx.exec(&sql, &args).await?;
    Ok(())
}

const KINDS: [Kind; 7] =
    [Kind::Text, Kind::Int, Kind::Text, Kind::Text, Kind::Text, Kind::Text, Kind::Text];

/// The records matching `query`, newest first.
pub(crate) async fn log(core: &Core, query: &AuditQuery) -> Result<Vec<AuditRecord>> {
    let conditions = [
        ("actor = ?", query.actor.as_str()),
        ("action_name = ?", query.action.as_str()),
        ("target = ?", query.target.as_str()),
    ];
    // No record holds a NUL (contract §E7.3), and PostgreSQL's text cannot carry one.
    if conditions.iter().any(|(_, value)| taskgate::validate::has_nul(value)) {
        return Ok(Vec::new());
    }
    let (sql, args) = crate::ops::read::paged_query(
        "SELECT id, at_ms, actor, action_name, target, outcome, detail FROM {audit}",
        &conditions,
        "at_ms DESC, id DESC",
        query.limit,
        query.offset,
    );
    let rows = core
        .adapter
        .read(&core.render(&sql), &args, &KINDS)
        .await
        .map_err(|e| core.backend_error(e))?;
    rows.iter()
        .map(|r| decode(r).map_err(|e| core.backend_error(crate::DbError::Decode(Box::new(e)))))
        .collect()
}

fn decode(row: &[Value]) -> std::result::Result<AuditRecord, DecodeError> {
    let c = Cols(row);
    Ok(AuditRecord {
        id: c.text(0)?,
        at: Timestamp::from_millis(c.int(1)?),
        actor: c.text(2)?,
        action: c.text(3)?,
        target: c.text(4)?,
        outcome: c.text(5)?,
        detail: c.text(6)?,
    })
}
