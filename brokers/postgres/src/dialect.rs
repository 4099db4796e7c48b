//! [`PgDialect`]: what PostgreSQL says differently — `$n` placeholders, the server's clock in
//! floored milliseconds, `FOR UPDATE [SKIP LOCKED]`, one-statement claims, the quota upsert
//! with `RETURNING`, the wake channel's name, the advisory DDL lock, and error
//! classification by SQLSTATE on sqlx's structured error (never by message text).

use taskgate_sql::{
    ClaimShape, DbError, DdlLock, Dialect, Placeholder, QuotaShape, RetryClass, TimeSource,
    UniqueTarget, Value,
};

/// SQLSTATE `unique_violation`.
pub(crate) const UNIQUE_VIOLATION: &str = "23505";
/// SQLSTATE `deadlock_detected`.
pub(crate) const DEADLOCK_DETECTED: &str = "40P01";
/// SQLSTATE `serialization_failure`.
pub(crate) const SERIALIZATION_FAILURE: &str = "40001";

/// The server's clock in unix milliseconds, floored. `clock_timestamp()` (not `now()`, the
/// transaction's start) so a transaction that waited for a row lock judges leases by the time
/// it got the lock.
const NOW_MS: &str = "CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp()) * 1000) AS BIGINT)";

/// The most claimed-but-uncommitted rows one broker handle keeps in flight
/// ([`Dialect::claim_rows_in_flight`]): 8 claims of 100 at once, 80 of 10, 800 of one. Chosen
/// by measurement on PostgreSQL 15 (report notes finding 26): at 64 claimers × batch 100 it
/// drained 25,000–37,000 jobs/s against 15,000–19,000 unbounded, and 16 × 100 was no slower.
pub(crate) const CLAIM_ROWS_IN_FLIGHT: usize = 800;

/// The PostgreSQL dialect.
///
/// `tag` identifies one broker handle in the payload of its wake-up notifications, so the
/// handle's own listener can skip the wake-ups it already delivered in-process.
#[derive(Clone, Debug, Default)]
pub struct PgDialect {
    tag: String,
    pooled: bool,
}

impl PgDialect {
    /// A dialect whose wake-up notifications carry `tag` as payload.
    pub fn new(tag: impl Into<String>) -> PgDialect {
        PgDialect { tag: tag.into(), pooled: false }
    }

    /// The dialect behind a transaction pooler: no session-level DDL lock (the migration
    /// session takes `pg_advisory_xact_lock` in each of its transactions instead, on the same
    /// key, so it excludes handles that migrate without a pooler too).
    pub fn behind_transaction_pooler(mut self) -> PgDialect {
        self.pooled = true;
        self
    }

    /// The payload of this handle's wake-up notifications.
    pub fn tag(&self) -> &str {
        &self.tag
    }
}

/// The LISTEN/NOTIFY channel of a table prefix.
pub(crate) fn wake_channel(prefix: &str) -> String {
    format!("{prefix}wake")
}

/// The advisory-lock key of `key`: FNV-1a-64 of `"taskgate:" + key`, as a signed BIGINT
/// (contract §11.2).
pub(crate) fn advisory_key(key: &str) -> i64 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = "taskgate:"
        .bytes()
        .chain(key.bytes())
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    i64::from_ne_bytes(hash.to_ne_bytes())
}

/// True when `error` means the connection is gone: an I/O error, a `08…` connection
/// exception, `57P01` admin shutdown (`pg_terminate_backend`), `57P02` crash shutdown or
/// `57P03` cannot connect now.
pub(crate) fn is_connection_lost(error: &DbError) -> bool {
    match error {
        DbError::Io(_) => true,
        DbError::Database(db) => match db.code() {
            Some(code) => code.starts_with("08") || matches!(&*code, "57P01" | "57P02" | "57P03"),
            None => false,
        },
        _ => false,
    }
}

/// The SQLSTATE of a database error, read from sqlx's structured error.
pub fn sqlstate(error: &DbError) -> Option<String> {
    match error {
        DbError::Database(db) => db.code().map(|c| c.into_owned()),
        _ => None,
    }
}

/// The quota reservation (contract §9.5 with `floor`, notes §15.4). Arguments: key, the
/// now-seconds override or NULL, period, period, period (the row's `period` column), limit.
fn quota_sql(table: &str) -> String {
    format!(
        "INSERT INTO {table} (qkey, win, used, period) VALUES (?, \
         COALESCE(?, CAST(FLOOR(EXTRACT(EPOCH FROM clock_timestamp())) AS BIGINT)) / ? * ?, 1, ?) \
         ON CONFLICT (qkey, win) DO UPDATE SET used = {table}.used + 1 \
         WHERE {table}.used < ? RETURNING win"
    )
}

impl Dialect for PgDialect {
    fn name(&self) -> &'static str {
        "postgres"
    }

    fn placeholder(&self) -> Placeholder {
        Placeholder::Dollar
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    fn now_ms_sql(&self) -> &'static str {
        NOW_MS
    }

    fn lock_clause(&self) -> &'static str {
        " FOR UPDATE"
    }

    fn skip_locked_clause(&self) -> &'static str {
        " FOR UPDATE SKIP LOCKED"
    }

    fn claim_shape(&self) -> ClaimShape {
        ClaimShape::UpdateSkipLocked
    }

    fn claim_token_sql(&self) -> &'static str {
        // The claim's ULID, then a random UUID's 32 hex digits per row (`gen_random_uuid`,
        // built in since PostgreSQL 13): every claimed task has its own token.
        "? || replace(CAST(gen_random_uuid() AS TEXT), '-', '')"
    }

    fn claim_rows_in_flight(&self) -> Option<usize> {
        // Each claim's SKIP LOCKED scan passes the index entries of every row the claims in
        // flight hold: 64 claims of 100 at once drained half as fast as 4 (report notes
        // finding 26). 8 claims of 100, 80 of 10; claims of one are never held back.
        Some(CLAIM_ROWS_IN_FLIGHT)
    }

    fn update_returning(&self) -> bool {
        true
    }

    fn array_params(&self) -> bool {
        true
    }

    fn limit_all(&self) -> &'static str {
        "9223372036854775807"
    }

    fn insert_ignore(&self, table: &str, columns: &str, values: &str, key: &str) -> String {
        format!("INSERT INTO {table} ({columns}) VALUES ({values}) ON CONFLICT ({key}) DO NOTHING")
    }

    fn quota_shape(&self, table: &str) -> QuotaShape {
        QuotaShape::UpsertReturning { sql: quota_sql(table) }
    }

    fn ddl_lock(&self, key: &str) -> Option<DdlLock> {
        if self.pooled {
            return None;
        }
        let k = Value::Int(advisory_key(key));
        Some(DdlLock {
            lock_sql: "SELECT pg_advisory_lock(?)".to_owned(),
            lock_args: vec![k.clone()],
            lock_returns_one: false,
            unlock_sql: "SELECT pg_advisory_unlock(?)".to_owned(),
            unlock_args: vec![k],
        })
    }

    fn transactional_ddl(&self) -> bool {
        true
    }

    fn retry_class(&self, error: &DbError) -> RetryClass {
        if is_connection_lost(error) {
            // Before its COMMIT (a COMMIT's error is settled by the engine, never retried
            // here): the server rolled the transaction back with its connection.
            return RetryClass::Immediate;
        }
        match sqlstate(error).as_deref() {
            Some(DEADLOCK_DETECTED | SERIALIZATION_FAILURE) => RetryClass::Immediate,
            _ => RetryClass::Never,
        }
    }

    fn is_connection_lost(&self, error: &DbError) -> bool {
        is_connection_lost(error)
    }

    fn unique_violation(&self, error: &DbError, prefix: &str) -> Option<UniqueTarget> {
        let DbError::Database(db) = error else { return None };
        if db.code().as_deref() != Some(UNIQUE_VIOLATION) {
            return None;
        }
        let target = match db.constraint() {
            Some(c) if c == format!("{prefix}uq_chain_head") => UniqueTarget::ChainHead,
            Some(c) if c == format!("{prefix}uq_replay_of") => UniqueTarget::ReplayOf,
            Some(c) if c == format!("{prefix}tasks_pkey") => UniqueTarget::PrimaryKey,
            _ => UniqueTarget::Unnamed,
        };
        Some(target)
    }

    fn max_params(&self) -> usize {
        // The protocol's limit is 65,535 bound parameters per statement.
        60_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use taskgate_sql::rewrite_placeholders;

    #[test]
    fn claimed_rows_in_flight_are_bounded_and_small_claims_are_not() {
        assert_eq!(PgDialect::default().claim_rows_in_flight(), Some(CLAIM_ROWS_IN_FLIGHT));
        // Batch 1 gains from many commits at once: no bound on the number of claims.
        assert_eq!(PgDialect::default().claims_in_flight(), None);
        const { assert!(CLAIM_ROWS_IN_FLIGHT >= 8 * 100) };
    }

    #[test]
    fn placeholders_are_dollar_numbered_outside_literals() {
        assert_eq!(PgDialect::default().placeholder(), Placeholder::Dollar);
        let sql = "SELECT '?', 'it''s ?' FROM t WHERE a = ? AND b IN (?, ?) AND c = 'x?'";
        assert_eq!(
            rewrite_placeholders(sql),
            "SELECT '?', 'it''s ?' FROM t WHERE a = $1 AND b IN ($2, $3) AND c = 'x?'"
        );
    }

    #[test]
    fn plain_text_is_never_classified() {
        let d = PgDialect::default();
        let text = DbError::Protocol(
            "duplicate key value violates unique constraint \"taskgate_uq_chain_head\" \
             (SQLSTATE 23505); deadlock detected (40P01)"
                .into(),
        );
        assert_eq!(d.unique_violation(&text, "taskgate_"), None);
        assert_eq!(d.retry_class(&text), RetryClass::Never);
        assert_eq!(sqlstate(&text), None);
        assert_eq!(d.retry_class(&DbError::PoolTimedOut), RetryClass::Never);
    }

    #[test]
    fn ddl_has_prefix_bytea_bigint_and_the_claim_index() {
        let ddl: String = crate::MIGRATIONS
            .iter()
            .map(|m| m.sql.replace("{prefix}", "acme_"))
            .collect::<Vec<_>>()
            .join("\n");
        for needle in [
            "CREATE TABLE acme_tasks",
            "BYTEA",
            "BIGINT",
            "acme_idx_claim",
            "acme_idx_ready_prio",
            "COLLATE \"C\"",
        ] {
            assert!(ddl.contains(needle), "DDL lacks {needle}");
        }
        assert!(!ddl.contains("{prefix}"));
        let versions: Vec<(i64, &str)> =
            crate::MIGRATIONS.iter().map(|m| (m.version, m.name)).collect();
        let expected = [
            (1, "initial"),
            (2, "steps_pause_owner"),
            (3, "names_by_bytes"),
            (4, "priority"),
            (5, "audit"),
            (6, "ack_token"),
            (7, "heartbeat"),
        ];
        assert_eq!(versions, expected);
    }

    #[test]
    fn advisory_keys_are_stable_per_key_and_differ_across_prefixes() {
        let a = advisory_key("taskgate_schema");
        assert_eq!(a, advisory_key("taskgate_schema"));
        // FNV-1a-64 of "taskgate:taskgate_schema", pinned so the key never drifts between
        // releases (two versions must agree to serialise their migrations).
        assert_eq!(a, advisory_key_reference("taskgate:taskgate_schema"));
        assert_eq!(a, 5_761_706_637_528_362_721);
        assert_ne!(a, advisory_key("billing_schema"));
        assert_ne!(advisory_key("a_schema"), advisory_key("b_schema"));
        let lock = PgDialect::default().ddl_lock("taskgate_schema");
        let args = lock.map(|l| (l.lock_args, l.unlock_args, l.lock_returns_one));
        assert_eq!(args, Some((vec![Value::Int(a)], vec![Value::Int(a)], false)));
    }

    /// FNV-1a-64 written out bit by bit (the textbook definition), to cross-check.
    fn advisory_key_reference(text: &str) -> i64 {
        let mut hash: u64 = 14_695_981_039_346_656_037;
        for byte in text.as_bytes() {
            hash ^= u64::from(*byte);
            hash = hash.wrapping_mul(1_099_511_628_211);
        }
        i64::from_ne_bytes(hash.to_ne_bytes())
    }

    #[test]
    fn the_wake_channel_is_named_after_the_prefix() {
        assert_eq!(wake_channel("acme_"), "acme_wake");
    }
}
