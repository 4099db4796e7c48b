//! The [`Dialect`]: every way SQLite, PostgreSQL and MySQL/MariaDB differ that the engine needs
//! to know — syntax pieces, statement shapes, time, locks and error classification.
//!
//! The engine writes its SQL once with positional `?` placeholders, **never reusing one** (a
//! value needed twice is bound twice, because MySQL cannot reuse parameters), and asks the
//! dialect for the pieces that differ. PostgreSQL's `$n` form comes from
//! [`rewrite_placeholders`], applied by the engine when [`Dialect::placeholder`] says so.

use std::fmt;

use crate::{DbError, Value};

/// How a dialect writes bound parameters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Placeholder {
    /// `?` (SQLite, MySQL/MariaDB).
    Question,
    /// `$1, $2, …` (PostgreSQL).
    Dollar,
}

/// Where "now" comes from when no clock is injected (extensions §E1).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TimeSource {
    /// The local system clock (SQLite: every process on the file shares the machine).
    Local,
    /// The database server's clock ([`Dialect::now_ms_sql`]), read once per transaction.
    Server,
}

/// How a claim is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClaimShape {
    /// One `UPDATE … WHERE id IN (SELECT … ORDER BY run_at, id LIMIT n) RETURNING <cols>`
    /// (SQLite inside `BEGIN IMMEDIATE`). Needs [`Dialect::claim_token_sql`].
    UpdateReturning,
    /// One `WITH n AS (SELECT <now>) UPDATE … WHERE id = ANY(ARRAY(SELECT id … ORDER BY
    /// priority, run_at, id LIMIT n FOR UPDATE SKIP LOCKED)) RETURNING <cols>` (PostgreSQL):
    /// one statement and one round trip, the server's time read inside it, each row's token
    /// from [`Dialect::claim_token_sql`] (which must give every row its own).
    UpdateSkipLocked,
    /// `SELECT <cols> … ORDER BY run_at, id LIMIT n FOR UPDATE SKIP LOCKED`, then one
    /// `UPDATE … WHERE id IN (…)` with per-task tokens (MySQL/MariaDB, which have no
    /// `UPDATE … RETURNING`).
    SelectThenUpdate,
}

/// How a quota unit is reserved (contract §9.5, notes §15.1).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum QuotaShape {
    /// One upsert that returns the window when it reserved and no row when exhausted.
    /// Arguments in order: key, now-seconds override (or NULL), period, period, limit.
    UpsertReturning {
        /// The statement, with the table name already substituted.
        sql: String,
    },
    /// MySQL/MariaDB: read the medium time, ensure the window row exists with
    /// `used = used` (flag-independent), then `UPDATE … SET used = used + 1 WHERE … AND
    /// used < ?` — 1 row reserved, 0 exhausted, whatever `CLIENT_FOUND_ROWS` says.
    EnsureThenUpdate {
        /// `SELECT <now seconds>` with one override argument (or NULL).
        now_sql: String,
        /// Ensures the row (`used = used` on conflict): arguments key, window, period.
        ensure_sql: String,
        /// Reserves: arguments key, window, limit; affected rows 1 = reserved.
        update_sql: String,
    },
}

/// The retry class of a failed transaction (contract §11.2).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RetryClass {
    /// Deadlock or serialization failure: retry at once, up to 5 attempts in all.
    Immediate,
    /// Lock wait timeout (MySQL 1205): at most 2 attempts in all.
    Limited,
    /// Anything else: returned as is.
    Never,
}

/// Which unique index a violation hit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum UniqueTarget {
    /// The primary key (a preset ID): plain `TaskExists`.
    PrimaryKey,
    /// `<prefix>uq_chain_head`: `TaskExists` with the key's chain tail.
    ChainHead,
    /// `<prefix>uq_replay_of`: `AlreadyReplayed`.
    ReplayOf,
    /// A unique index the driver does not name (SQLite reports columns, not index names):
    /// the engine decides from the operation (enqueue ⇒ chain head, replay ⇒ replay_of).
    Unnamed,
}

/// Statements taking and releasing the database-wide DDL lock on one session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DdlLock {
    /// Takes the lock (e.g. `SELECT pg_advisory_lock(?)`, `SELECT GET_LOCK(?, 10)`).
    pub lock_sql: String,
    /// Arguments of `lock_sql`.
    pub lock_args: Vec<Value>,
    /// True when `lock_sql` returns one integer column that must be 1 (MySQL `GET_LOCK`).
    pub lock_returns_one: bool,
    /// Releases the lock.
    pub unlock_sql: String,
    /// Arguments of `unlock_sql`.
    pub unlock_args: Vec<Value>,
}

/// What differs between SQL databases, for the engine.
///
/// Implementations are small value types (`SqliteDialect`, `PgDialect`, `MySqlDialect`). The
/// engine builds its statement texts once per (dialect, table prefix) at construction, so
/// these methods are not on any hot path.
pub trait Dialect: Send + Sync + fmt::Debug + 'static {
    /// The backend name used in errors (`sqlite`, `postgres`, `mysql`).
    fn name(&self) -> &'static str;

    /// How parameters are written.
    fn placeholder(&self) -> Placeholder;

    /// Where "now" comes from without an injected clock.
    fn time_source(&self) -> TimeSource;

    /// An expression for the server's current time in unix milliseconds, floored
    /// (PostgreSQL `CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)`,
    /// MySQL `CAST(UNIX_TIMESTAMP(NOW(3)) * 1000 AS SIGNED)`). Used as
    /// `COALESCE(?, <this>)` so an injected clock overrides it.
    fn now_ms_sql(&self) -> &'static str;

    /// The row-lock suffix of a locking read (`" FOR UPDATE"`; SQLite `""` — `BEGIN IMMEDIATE`
    /// already serialises writers).
    fn lock_clause(&self) -> &'static str;

    /// The suffix of a claim's candidate read (`" FOR UPDATE SKIP LOCKED"`; SQLite `""`).
    fn skip_locked_clause(&self) -> &'static str;

    /// How claims are written.
    fn claim_shape(&self) -> ClaimShape;

    /// For [`ClaimShape::UpdateReturning`] and [`ClaimShape::UpdateSkipLocked`]: an
    /// expression giving each claimed row its own lease token from one bound per-claim
    /// prefix, e.g. SQLite `? || lower(hex(randomblob(10)))`.
    fn claim_token_sql(&self) -> &'static str {
        "?"
    }

    /// The most claimed-but-uncommitted rows one broker handle keeps in flight at once, or
    /// `None` for no bound (the default). With a bound, a claim for `n` tasks first waits
    /// (first come, first served, leaving when its caller does) until `min(n, bound)` of it
    /// are free, and gives them back when its transaction has ended.
    ///
    /// For databases whose `SKIP LOCKED` walks past every row other claims hold at the head
    /// of the claim index (InnoDB, and PostgreSQL past its uncommitted claims' index
    /// entries): each claim's cost grows with the rows held by claims in flight, and past a
    /// point claims slow each other down faster than they finish (report notes findings 10
    /// and 26). Claimers beyond the bound wait in the process, where waiting costs the
    /// database nothing.
    fn claim_rows_in_flight(&self) -> Option<usize> {
        None
    }

    /// The most claims one broker handle keeps in flight at once, whatever their size, or
    /// `None` for no bound (the default). A claim waits for this bound first, then for its
    /// rows under [`Dialect::claim_rows_in_flight`], leaving when its caller does.
    ///
    /// For databases where claims in flight slow each other down even when small (InnoDB: at
    /// 64 claimers × batch 10 the walk past the other claims' rows and their lock bookkeeping
    /// cost more than the overlap gains; report notes finding 26).
    fn claims_in_flight(&self) -> Option<usize> {
        None
    }

    /// True when `UPDATE … RETURNING` exists (SQLite ≥ 3.35, PostgreSQL): ack is then one
    /// statement. MySQL/MariaDB: false (a locking read, then the update).
    fn update_returning(&self) -> bool {
        false
    }

    /// True when a list can be bound as one array argument ([`Value::TextArray`],
    /// [`Value::BytesArray`]) and unnested in SQL (PostgreSQL): a batch ack then joins its
    /// `(id, token)` pairs by primary key in one statement whose text does not depend on the
    /// batch size. Default false (SQLite, MySQL/MariaDB: one placeholder per value).
    fn array_params(&self) -> bool {
        false
    }

    /// The condition selecting the claimable (pending or retrying) tasks of the queues that
    /// `queue_test` matches (`= ?` or `IN (?, …)`), written so the dialect's ready index
    /// serves it. Claims, the next-due probe and `queue_len` use it.
    ///
    /// Default: `queue <test> AND status IN ('pending', 'retrying')`, for a partial index on
    /// `(queue, run_at, id) WHERE status IN ('pending', 'retrying')` (SQLite, PostgreSQL).
    /// MySQL/MariaDB have no partial indexes: `ready_queue <test>`, a STORED generated column
    /// that holds `queue` exactly while the task is claimable, indexed with `(run_at, id)`.
    fn ready_condition(&self, queue_test: &str) -> String {
        format!("queue {queue_test} AND status IN ('pending', 'retrying')")
    }

    /// Written right after the tasks table's name in statements that read ready tasks
    /// ([`Dialect::ready_condition`]), e.g. MySQL ` FORCE INDEX (<prefix>idx_ready)` so the
    /// plan cannot flip to a table scan when statistics undercount the ready rows. Default
    /// empty.
    fn ready_index_hint(&self, prefix: &str) -> String {
        let _ = prefix;
        String::new()
    }

    /// Written right after the tasks table's name in a claim's candidate read, which orders
    /// by `(priority, run_at, id)` (migration 0004's claim index), e.g. MySQL
    /// ` FORCE INDEX (<prefix>idx_ready_prio)`. Default empty.
    fn claim_index_hint(&self, prefix: &str) -> String {
        let _ = prefix;
        String::new()
    }

    /// Options appended to the `CREATE TABLE` of the migration runner's own table
    /// (`<prefix>schema_migrations`), e.g. MySQL's engine and collation. Default empty.
    fn table_options(&self) -> &'static str {
        ""
    }

    /// The LIMIT value meaning "all rows" when only an offset is given (SQLite `-1`,
    /// PostgreSQL/MySQL `9223372036854775807`).
    fn limit_all(&self) -> &'static str;

    /// `INSERT … ` that does nothing when the row exists: SQLite/PostgreSQL
    /// `INSERT INTO t (cols) VALUES (…) ON CONFLICT (key) DO NOTHING`, MySQL
    /// `INSERT INTO t (cols) VALUES (…) ON DUPLICATE KEY UPDATE key = key` (not `INSERT IGNORE`,
    /// which would turn other errors into warnings too). `values` is the already-written
    /// `?, ?` list.
    fn insert_ignore(&self, table: &str, columns: &str, values: &str, key: &str) -> String;

    /// The quota statements for quota table `table` (contract §9.5).
    fn quota_shape(&self, table: &str) -> QuotaShape;

    /// The database-wide DDL lock for `key` (`<prefix>schema`); `None` when the migration
    /// transaction itself serialises (SQLite's `BEGIN IMMEDIATE`).
    fn ddl_lock(&self, key: &str) -> Option<DdlLock>;

    /// True when DDL is transactional (SQLite, PostgreSQL): each migration and its record
    /// commit together. MySQL commits DDL implicitly; its migrations must be idempotent.
    fn transactional_ddl(&self) -> bool;

    /// Classifies a failed statement for the retry loop, on the driver's structured error
    /// (PG SQLSTATE 40P01/40001, MySQL errno 1213 / 1205). A statement that failed because
    /// its connection was lost ([`Dialect::is_connection_lost`]) before the COMMIT was sent
    /// may be classified [`RetryClass::Immediate`]: the server rolled the transaction back.
    /// A COMMIT that failed that way never comes here (its outcome is unknown; the engine
    /// settles it, see `TxRun`).
    fn retry_class(&self, error: &DbError) -> RetryClass;

    /// True when `error` means the connection itself is gone (a socket error; the server
    /// terminating the session). Met on a COMMIT, it means the transaction may or may not
    /// have been applied. Default: never (SQLite has no connection to lose).
    fn is_connection_lost(&self, error: &DbError) -> bool {
        let _ = error;
        false
    }

    /// `Some` when `error` is a unique violation (PG 23505, MySQL 1062, SQLite 1555/2067),
    /// with the index it hit when the driver says. `prefix` is the table prefix, for
    /// matching index names.
    fn unique_violation(&self, error: &DbError, prefix: &str) -> Option<UniqueTarget>;

    /// True for an error that means an idempotent DDL statement was already applied
    /// (MySQL 1060 duplicate column, 1061 duplicate key name). Never on PostgreSQL/SQLite.
    fn is_already_applied(&self, error: &DbError) -> bool {
        let _ = error;
        false
    }

    /// Most bound parameters one statement may carry; batches are chunked below it.
    fn max_params(&self) -> usize {
        30_000
    }
}

/// Rewrites `?` placeholders to `$1, $2, …`, skipping `?` inside single-quoted literals
/// (with `''` escapes), double-quoted identifiers and `--` line comments.
pub fn rewrite_placeholders(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 16);
    let mut n = 0usize;
    let mut chars = sql.chars().peekable();
    let mut quote: Option<char> = None;
    let mut comment = false;
    while let Some(c) = chars.next() {
        out.push(c);
        if comment {
            comment = c != '\n';
            continue;
        }
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '-') if chars.peek() == Some(&'-') => comment = true,
            (None, '?') => {
                out.pop();
                n += 1;
                out.push('$');
                out.push_str(&n.to_string());
            }
            (None, _) => {}
        }
    }
    out
}

/// `?, ?, …` with `n` placeholders (an `IN (…)` list).
pub fn placeholders(n: usize) -> String {
    let mut s = String::with_capacity(n * 3);
    for i in 0..n {
        if i > 0 {
            s.push_str(", ");
        }
        s.push('?');
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dollar_rewrite_numbers_in_order() {
        assert_eq!(
            rewrite_placeholders("SELECT a FROM t WHERE x = ? AND y IN (?, ?)"),
            "SELECT a FROM t WHERE x = $1 AND y IN ($2, $3)"
        );
    }

    #[test]
    fn dollar_rewrite_skips_literals_identifiers_and_comments() {
        let sql = "SELECT '?', 'it''s ?', \"q?\" -- why?\n FROM t WHERE a = ?";
        assert_eq!(
            rewrite_placeholders(sql),
            "SELECT '?', 'it''s ?', \"q?\" -- why?\n FROM t WHERE a = $1"
        );
    }

    #[test]
    fn in_lists() {
        assert_eq!(placeholders(0), "");
        assert_eq!(placeholders(3), "?, ?, ?");
    }
}
