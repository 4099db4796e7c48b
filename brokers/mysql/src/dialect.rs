//! [`MySqlDialect`]: what MySQL 8.0.17+ and MariaDB 10.6+ say differently from the other SQL
//! databases — `?` placeholders never reused, the server clock in milliseconds, `FOR UPDATE
//! SKIP LOCKED` claims, the flag-independent two-step quota, `GET_LOCK` for migrations, and
//! error classification by the server's error number.
//!
//! Every statement here is accepted by both MySQL 8.0/8.4 and MariaDB 10.6+; where the two
//! differ (the 1062 message names the key with or without its table) the code says so.

use sqlx::mysql::MySqlDatabaseError;
use taskgate_sql::{
    ClaimShape, DbError, DdlLock, Dialect, Placeholder, QuotaShape, RetryClass, TimeSource,
    UniqueTarget, Value,
};

/// ER_DUP_ENTRY: a unique key was violated.
pub(crate) const ER_DUP_ENTRY: u16 = 1062;
/// ER_DUP_ENTRY_WITH_KEY_NAME: the same, in the form some statements report it.
pub(crate) const ER_DUP_ENTRY_WITH_KEY_NAME: u16 = 1586;
/// ER_LOCK_DEADLOCK: InnoDB chose this transaction as a deadlock victim (it was rolled back).
pub(crate) const ER_LOCK_DEADLOCK: u16 = 1213;
/// ER_LOCK_WAIT_TIMEOUT: a row lock was not granted within `innodb_lock_wait_timeout`.
pub(crate) const ER_LOCK_WAIT_TIMEOUT: u16 = 1205;
/// ER_DUP_FIELDNAME: `ADD COLUMN` of a column that exists (an idempotent migration re-run).
pub(crate) const ER_DUP_FIELDNAME: u16 = 1060;
/// ER_DUP_KEYNAME: `ADD KEY` of an index that exists (an idempotent migration re-run).
pub(crate) const ER_DUP_KEYNAME: u16 = 1061;
/// ER_CANT_DROP_FIELD_OR_KEY: `DROP KEY` of an index already dropped (an idempotent re-run).
pub(crate) const ER_CANT_DROP_FIELD_OR_KEY: u16 = 1091;

/// ER_SERVER_SHUTDOWN: the server is shutting down (the connection goes with it).
pub(crate) const ER_SERVER_SHUTDOWN: u16 = 1053;
/// ER_CONNECTION_KILLED (MariaDB): this connection was killed.
pub(crate) const ER_CONNECTION_KILLED: u16 = 1927;
/// ER_CLIENT_INTERACTION_TIMEOUT (MySQL 8.0.24+): the server closed an idle connection.
pub(crate) const ER_CLIENT_INTERACTION_TIMEOUT: u16 = 4031;

/// ER_SP_DOES_NOT_EXIST, as `RELEASE SAVEPOINT` answers it for a savepoint that is gone: on a
/// Galera node, the transaction the savepoint belonged to ended without telling its client (a
/// brute-force abort whose 1213 was never delivered, see `adapter::GALERA_COMMIT`), so nothing
/// it wrote is applied and it can run again. The broker creates no stored procedures, the
/// error's other meaning.
pub(crate) const ER_SP_DOES_NOT_EXIST: u16 = 1305;

/// ER_UNKNOWN_COM_ERROR, as a Galera node sends it while it is not in the primary component
/// or not yet synced ("WSREP has not yet prepared node for application use"): the statement
/// was refused, nothing was applied.
pub(crate) const ER_WSREP_NOT_READY: u16 = 1047;

/// Longest name `GET_LOCK` accepts (MySQL 5.7+ and MariaDB).
pub(crate) const MAX_LOCK_NAME_CHARS: usize = 64;

/// Seconds `GET_LOCK` waits for a concurrent migration before init fails (contract §11.2).
pub(crate) const DDL_LOCK_WAIT_SECS: i64 = 10;

/// The most claimed-but-uncommitted rows one broker handle keeps in flight
/// ([`Dialect::claim_rows_in_flight`]): 8 claims of 100 at once, 80 of 10, 800 of one. Chosen
/// by measurement on MariaDB 10.11 (report notes finding 10): at 64 claimers × batch 100 a
/// bound of 400 was as fast and 1,600 slower, and 400 made 16 claimers × batch 100 slower.
pub(crate) const CLAIM_ROWS_IN_FLIGHT: usize = 800;

/// The most claims one broker handle keeps in flight, whatever their size
/// ([`Dialect::claims_in_flight`]). Chosen by measurement on MariaDB 10.11 (report notes
/// finding 26): 64 claimers drained 4,900 jobs/s at batch 10 (1,500–2,100 with 64 claims in
/// flight), 1,200 at batch 1 (700–800) and 12,500–13,100 at batch 100 (9,300–12,000 with 8);
/// 16 claimers at batch 1 no slower.
pub(crate) const CLAIMS_IN_FLIGHT: usize = 4;

/// The MySQL/MariaDB dialect.
#[derive(Clone, Copy, Debug, Default)]
pub struct MySqlDialect;

/// The server's error number, when `error` is a MySQL/MariaDB error packet (never from text).
pub fn error_number(error: &DbError) -> Option<u16> {
    match error {
        DbError::Database(db) => db.try_downcast_ref::<MySqlDatabaseError>().map(|e| e.number()),
        _ => None,
    }
}

/// True when `error` means the connection itself is gone (a socket error, or the server
/// saying it killed or dropped the session): the server rolled back whatever transaction was
/// open on it, so a transaction that failed this way *before* its COMMIT was sent can run
/// again on another connection. A COMMIT that failed this way has an unknown outcome: the
/// engine settles it (it finds out whether the transaction was applied), never retries it
/// blindly.
pub(crate) fn is_connection_lost(error: &DbError) -> bool {
    match error {
        DbError::Io(_) => true,
        _ => matches!(
            error_number(error),
            Some(ER_SERVER_SHUTDOWN | ER_CONNECTION_KILLED | ER_CLIENT_INTERACTION_TIMEOUT)
        ),
    }
}

/// The retry class of a server error number (contract §11.2): deadlock victims are retried at
/// once, lock-wait timeouts once more, everything else never. On Galera a certification
/// conflict and a transaction aborted for a replicated write (brute-force abort) are 1213 as
/// well, and a node outside the primary component refuses statements with 1047 (retried once,
/// like a lock-wait timeout). A Galera transaction found silently ended at its COMMIT
/// ([`ER_SP_DOES_NOT_EXIST`]) is retried like a deadlock victim.
pub(crate) fn retry_class_of(number: u16) -> RetryClass {
    match number {
        ER_LOCK_DEADLOCK | ER_SP_DOES_NOT_EXIST => RetryClass::Immediate,
        ER_LOCK_WAIT_TIMEOUT | ER_WSREP_NOT_READY => RetryClass::Limited,
        _ => RetryClass::Never,
    }
}

/// The index a 1062 message names: the text after the last `for key '`, without its closing
/// quote and without the `table.` qualifier MySQL 8 adds (MariaDB names the key alone).
pub(crate) fn duplicate_key_name(message: &str) -> Option<&str> {
    const MARK: &str = "for key '";
    let start = message.rfind(MARK)? + MARK.len();
    let quoted = &message[start..];
    let name = quoted.strip_suffix('\'').unwrap_or(quoted);
    Some(name.rsplit('.').next().unwrap_or(name))
}

/// Which unique index a 1062 message names, for table prefix `prefix`.
///
/// This is the one place taskgate reads a database error's *text*: MySQL and MariaDB report
/// the violated index only inside the 1062 message (`Duplicate entry 'x' for key
/// 'p_tasks.p_uq_chain_head'` on MySQL 8, `… for key 'p_uq_chain_head'` on MariaDB), never as
/// a structured field (contract §8.5). The error number itself is structured and checked
/// first; the key name is taken from the end of the message, so a duplicate *value* that
/// happens to contain an index name cannot fool it.
pub(crate) fn unique_target_of(message: &str, prefix: &str) -> UniqueTarget {
    let Some(name) = duplicate_key_name(message) else { return UniqueTarget::Unnamed };
    match name.strip_prefix(prefix) {
        Some("uq_chain_head") => UniqueTarget::ChainHead,
        Some("uq_replay_of") => UniqueTarget::ReplayOf,
        _ => UniqueTarget::PrimaryKey,
    }
}

/// The `GET_LOCK` name for lock key `key`: `taskgate:<key>`, cut to 64 characters.
pub(crate) fn lock_name(key: &str) -> String {
    format!("taskgate:{key}").chars().take(MAX_LOCK_NAME_CHARS).collect()
}

impl Dialect for MySqlDialect {
    fn name(&self) -> &'static str {
        "mysql"
    }

    fn placeholder(&self) -> Placeholder {
        Placeholder::Question
    }

    fn time_source(&self) -> TimeSource {
        TimeSource::Server
    }

    fn now_ms_sql(&self) -> &'static str {
        // Sessions run with time_zone '+00:00' (sqlx's default), so UNIX_TIMESTAMP(NOW(3))
        // is exact; FLOOR keeps the contract's "floored to ms" even if the scale changes.
        "CAST(FLOOR(UNIX_TIMESTAMP(NOW(3)) * 1000) AS SIGNED)"
    }

    fn lock_clause(&self) -> &'static str {
        " FOR UPDATE"
    }

    fn skip_locked_clause(&self) -> &'static str {
        // MySQL 8.0+, MariaDB 10.6+.
        " FOR UPDATE SKIP LOCKED"
    }

    fn claim_shape(&self) -> ClaimShape {
        // No RETURNING on UPDATE in MySQL (MariaDB has it only on INSERT/DELETE).
        ClaimShape::SelectThenUpdate
    }

    fn claim_rows_in_flight(&self) -> Option<usize> {
        // InnoDB's SKIP LOCKED walks past every row the claims in flight hold at the head of
        // idx_ready_prio (and counts each as a row lock of the walker): with 64 claims of 100
        // in flight each claim passed ~6,300 of them and claims stalled for seconds. Claimers
        // past the bound wait in the process instead (report notes finding 10).
        Some(CLAIM_ROWS_IN_FLIGHT)
    }

    fn claims_in_flight(&self) -> Option<usize> {
        // Even small claims slow each other down on InnoDB past a few at once (the walk, the
        // lock bookkeeping of each skipped record): the rest wait in the process.
        Some(CLAIMS_IN_FLIGHT)
    }

    fn ready_condition(&self, queue_test: &str) -> String {
        // `ready_queue` (migration 0002) holds `queue` exactly while the task is pending or
        // retrying and NULL otherwise, so this selects the same rows as `queue <test> AND
        // status IN ('pending', 'retrying')`. On `idx_ready (ready_queue, run_at, id)` a
        // claim's `ORDER BY run_at, id LIMIT n FOR UPDATE SKIP LOCKED` walks the index in
        // order and stops after n unlocked rows; finished rows are never in the range. With
        // the status range instead, MySQL sorts, and locks every ready row of the queue until
        // commit (concurrent claimers then find nothing; measured on MariaDB 10.11).
        format!("ready_queue {queue_test}")
    }

    fn ready_index_hint(&self, prefix: &str) -> String {
        // `ready_queue` is NULL for every finished row, and InnoDB's per-key average (NULLs
        // counted as one value) can make a table scan look cheaper than the ready index
        // (observed on MariaDB 10.11 after ANALYZE with 4,000 finished rows).
        format!(" FORCE INDEX ({prefix}idx_ready)")
    }

    fn claim_index_hint(&self, prefix: &str) -> String {
        // The claim's order, `(priority, run_at, id)`, is `idx_ready_prio` (migration 0004);
        // forced for the same reason as `idx_ready`.
        format!(" FORCE INDEX ({prefix}idx_ready_prio)")
    }

    fn table_options(&self) -> &'static str {
        // The runner's own table (`schema_migrations`, no names compared): utf8mb4 in InnoDB,
        // as migrations 0001–0002 created every table (0003 moves the name columns to NO PAD).
        " ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin"
    }

    fn limit_all(&self) -> &'static str {
        "9223372036854775807"
    }

    fn insert_ignore(&self, table: &str, columns: &str, values: &str, key: &str) -> String {
        // Not `INSERT IGNORE`, which also turns other errors (truncation, bad values) into
        // warnings: only the duplicate key is ignored here.
        format!(
            "INSERT INTO {table} ({columns}) VALUES ({values}) ON DUPLICATE KEY UPDATE {key} = {key}"
        )
    }

    fn quota_shape(&self, table: &str) -> QuotaShape {
        // The flag-independent form of notes §15.1: sqlx 0.8.6 always sets CLIENT_FOUND_ROWS,
        // under which an unchanged row reports 1 affected row. The limit is in the UPDATE's
        // WHERE, so "matched" and "changed" coincide: 1 = reserved, 0 = exhausted, either way.
        QuotaShape::EnsureThenUpdate {
            now_sql: "SELECT CAST(COALESCE(?, UNIX_TIMESTAMP()) AS SIGNED)".to_owned(),
            ensure_sql: format!(
                "INSERT INTO {table} (qkey, win, used, period) VALUES (?, ?, 0, ?) \
                 ON DUPLICATE KEY UPDATE used = used"
            ),
            update_sql: format!(
                "UPDATE {table} SET used = used + 1 WHERE qkey = ? AND win = ? AND used < ?"
            ),
        }
    }

    fn ddl_lock(&self, key: &str) -> Option<DdlLock> {
        let name = Value::Text(lock_name(key));
        Some(DdlLock {
            lock_sql: "SELECT GET_LOCK(?, ?)".to_owned(),
            lock_args: vec![name.clone(), Value::Int(DDL_LOCK_WAIT_SECS)],
            lock_returns_one: true,
            unlock_sql: "SELECT RELEASE_LOCK(?)".to_owned(),
            unlock_args: vec![name],
        })
    }

    fn transactional_ddl(&self) -> bool {
        false
    }

    fn retry_class(&self, error: &DbError) -> RetryClass {
        if is_connection_lost(error) {
            // Never a COMMIT's error (the engine settles those): the transaction was rolled
            // back with its connection, so it runs again on a fresh one.
            return RetryClass::Immediate;
        }
        error_number(error).map_or(RetryClass::Never, retry_class_of)
    }

    fn is_connection_lost(&self, error: &DbError) -> bool {
        is_connection_lost(error)
    }

    fn unique_violation(&self, error: &DbError, prefix: &str) -> Option<UniqueTarget> {
        let DbError::Database(db) = error else { return None };
        let mysql = db.try_downcast_ref::<MySqlDatabaseError>()?;
        match mysql.number() {
            ER_DUP_ENTRY | ER_DUP_ENTRY_WITH_KEY_NAME => {
                Some(unique_target_of(mysql.message(), prefix))
            }
            _ => None,
        }
    }

    fn is_already_applied(&self, error: &DbError) -> bool {
        matches!(
            error_number(error),
            Some(ER_DUP_FIELDNAME | ER_DUP_KEYNAME | ER_CANT_DROP_FIELD_OR_KEY)
        )
    }

    fn max_params(&self) -> usize {
        // The protocol allows 65,535 parameters per prepared statement.
        60_000
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rebind_is_a_no_op() {
        assert_eq!(MySqlDialect.placeholder(), Placeholder::Question);
    }

    #[test]
    fn deadlock_retries_at_once_lock_timeout_once_duplicate_never() {
        assert_eq!(retry_class_of(ER_LOCK_DEADLOCK), RetryClass::Immediate);
        assert_eq!(retry_class_of(ER_LOCK_WAIT_TIMEOUT), RetryClass::Limited);
        assert_eq!(retry_class_of(ER_WSREP_NOT_READY), RetryClass::Limited);
        assert_eq!(retry_class_of(ER_DUP_ENTRY), RetryClass::Never);
        assert_eq!(retry_class_of(1146), RetryClass::Never);
    }

    #[test]
    fn a_lost_connection_is_retried() {
        let io = DbError::Io(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "eof"));
        assert!(is_connection_lost(&io));
        assert_eq!(MySqlDialect.retry_class(&io), RetryClass::Immediate);
        assert!(!is_connection_lost(&DbError::PoolTimedOut));
    }

    #[test]
    fn errors_without_a_server_packet_are_never_classified() {
        let text = DbError::Protocol("1213 Deadlock found when trying to get lock".into());
        assert_eq!(MySqlDialect.retry_class(&text), RetryClass::Never);
        let dup = DbError::Protocol("Duplicate entry 'k' for key 'p_uq_chain_head'".into());
        assert_eq!(MySqlDialect.unique_violation(&dup, "p_"), None);
        assert!(!MySqlDialect.is_already_applied(&DbError::Protocol("1060".into())));
    }

    #[test]
    fn duplicate_key_names_from_mysql_and_mariadb() {
        let mysql = "Duplicate entry 'k1' for key 'tg_tasks.tg_uq_chain_head'";
        let mariadb = "Duplicate entry 'k1' for key 'tg_uq_chain_head'";
        assert_eq!(unique_target_of(mysql, "tg_"), UniqueTarget::ChainHead);
        assert_eq!(unique_target_of(mariadb, "tg_"), UniqueTarget::ChainHead);
        let replay = "Duplicate entry '01J' for key 'tg_tasks.tg_uq_replay_of'";
        assert_eq!(unique_target_of(replay, "tg_"), UniqueTarget::ReplayOf);
        assert_eq!(
            unique_target_of("Duplicate entry 'x' for key 'PRIMARY'", "tg_"),
            UniqueTarget::PrimaryKey
        );
        assert_eq!(
            unique_target_of("Duplicate entry 'x' for key 'tg_tasks.PRIMARY'", "tg_"),
            UniqueTarget::PrimaryKey
        );
    }

    #[test]
    fn a_duplicate_value_naming_an_index_does_not_fool_the_match() {
        let sneaky = "Duplicate entry 'for key 'tg_uq_chain_head'' for key 'PRIMARY'";
        assert_eq!(unique_target_of(sneaky, "tg_"), UniqueTarget::PrimaryKey);
        let other_prefix = "Duplicate entry 'k' for key 'xx_uq_chain_head'";
        assert_eq!(unique_target_of(other_prefix, "tg_"), UniqueTarget::PrimaryKey);
        assert_eq!(unique_target_of("no key named here", "tg_"), UniqueTarget::Unnamed);
    }

    #[test]
    fn lock_name_fits_get_lock() {
        let long = format!("{}schema", "p".repeat(30));
        assert!(lock_name(&long).chars().count() <= MAX_LOCK_NAME_CHARS);
        assert!(lock_name(&"é".repeat(100)).chars().count() <= MAX_LOCK_NAME_CHARS);
        assert_eq!(lock_name("taskgate_schema"), "taskgate:taskgate_schema");
        let lock = MySqlDialect.ddl_lock("taskgate_schema");
        assert!(lock.is_some_and(|l| l.lock_returns_one && l.lock_sql.contains("GET_LOCK")));
    }

    #[test]
    fn claims_in_flight_are_bounded() {
        assert_eq!(MySqlDialect.claim_rows_in_flight(), Some(CLAIM_ROWS_IN_FLIGHT));
        assert_eq!(MySqlDialect.claims_in_flight(), Some(CLAIMS_IN_FLIGHT));
        // A batch of 100 leaves room for every claim the claim bound lets through.
        const { assert!(CLAIM_ROWS_IN_FLIGHT >= CLAIMS_IN_FLIGHT * 100) };
    }

    #[test]
    fn quota_is_the_flag_independent_two_step_form() {
        match MySqlDialect.quota_shape("p_quota") {
            QuotaShape::EnsureThenUpdate { ensure_sql, update_sql, .. } => {
                assert!(ensure_sql.contains("ON DUPLICATE KEY UPDATE used = used"));
                assert!(update_sql.contains("AND used < ?"));
                assert_eq!(update_sql.matches('?').count(), 3);
                assert_eq!(ensure_sql.matches('?').count(), 3);
            }
            other => panic!("unexpected quota shape {other:?}"),
        }
    }
}
