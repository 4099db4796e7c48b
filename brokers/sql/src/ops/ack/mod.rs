//! Ack (contract §3.4), its two forms side by side:
//!
//! - **one statement** where the dialect has `UPDATE … RETURNING` (SQLite, PostgreSQL) and no
//!   statement limit applies: the token check is in the WHERE clause and the returned rows are
//!   the snapshots, so the common case costs one round trip; items not returned are then told
//!   apart (NotFound / LeaseLost) by one more read;
//! - **a locking read, then one set-based `UPDATE`** (MySQL/MariaDB, and a batch naming one ID
//!   twice), split below the server's statement limit when results are large.
//!
//! [`ack_many`] chooses (`returning.rs`, `locking.rs`); both propagate to children in the same
//! transaction.
//!
//! Before either, where the dialect takes array parameters (PostgreSQL) and nothing needs the
//! rows back (no Notify observer), [`ack_autocommit`](autocommit::ack_autocommit) completes the childless items in one
//! autocommit statement (`autocommit.rs`) and leaves the rest to the transaction; `choose.rs` runs
//! a call's items through the two.

pub(crate) mod autocommit;
pub(crate) mod choose;
mod locking;
mod returning;

use taskgate::{AckItem, Result, Timestamp};

pub(crate) use locking::{ack_complete_sql, ack_lock_slim_sql, ack_lock_sql};
pub(crate) use returning::{ack_returning_sql, ack_unnest_sql};

use crate::core::Core;
use crate::tx::{Tx, TxFail};

/// What one ack transaction returns: each item's outcome, and the time it wrote as
/// `finished_at` (when it completed any).
pub(crate) type AckRun = (Vec<Result<()>>, Option<Timestamp>);

/// Acks `items` in one transaction, each with its own outcome: in one statement when
/// `returning` (the dialect has `UPDATE … RETURNING` and no statement limit applies), else by
/// a locking read.
pub(crate) async fn ack_many(
    tx: &mut Tx<'_>,
    items: &[AckItem],
    returning: bool,
) -> std::result::Result<AckRun, TxFail> {
    let outcomes = match returning {
        true => returning::ack_returning(tx, items).await?,
        false => locking::ack_locking(tx, items).await?,
    };
    Ok((outcomes, tx.known_now()))
}

/// True when acks use the one-statement form, which binds every result in one statement:
/// with a server statement limit, the two-step form splits the write instead.
pub(crate) fn returning_form(core: &Core) -> bool {
    core.dialect.update_returning() && core.statement_budget().is_none()
}

/// Items per ack transaction, so one statement stays under the dialect's parameter limit.
pub(crate) fn chunk_size(core: &Core) -> usize {
    (core.dialect.max_params() / 4).clamp(1, 1_000)
}
