//! What the broker needs to know about the server it talks to, decided from what the server
//! says about itself — which NO PAD binary collation it has (names compare by bytes) — and the
//! set-up every broker session runs once when its connection opens.

use std::sync::OnceLock;

use sqlx::{Executor, MySqlConnection};

/// MariaDB's NO PAD binary collation of `utf8mb4` (MariaDB 10.2+).
pub const MARIADB_NOPAD_BIN: &str = "utf8mb4_nopad_bin";
/// MySQL's NO PAD binary collation of `utf8mb4` (MySQL 8.0.17+). MySQL's `utf8mb4_bin` is
/// PAD SPACE, like MariaDB's.
pub const MYSQL_NOPAD_BIN: &str = "utf8mb4_0900_bin";

/// The collation name columns and sessions use on a server whose `SELECT VERSION()` is
/// `version`: a binary collation that does not pad, so `'q'` and `'q '` are two names.
///
/// MariaDB (the version names it, e.g. `10.11.6-MariaDB-0+deb12u1`): `utf8mb4_nopad_bin`.
/// MySQL 8.0.17 and later (`8.0.36`, `8.4.0`, `9.1.0`): `utf8mb4_0900_bin`. Older MySQL has no
/// NO PAD binary `utf8mb4` collation (nor `SKIP LOCKED` before 8.0.1): the error says which
/// version is needed.
pub fn nopad_collation(version: &str) -> Result<&'static str, String> {
    if version.to_ascii_lowercase().contains("mariadb") {
        return Ok(MARIADB_NOPAD_BIN);
    }
    let mut parts = version.split(|c: char| !c.is_ascii_digit()).map(|p| p.parse::<u32>().ok());
    let numbers = (parts.next().flatten(), parts.next().flatten(), parts.next().flatten());
    match numbers {
        (Some(major), Some(minor), Some(patch)) if (major, minor, patch) >= (8, 0, 17) => {
            Ok(MYSQL_NOPAD_BIN)
        }
        _ => Err(format!(
            "server version {version:?} is not supported: taskgate needs MySQL 8.0.17 or later \
             ({MYSQL_NOPAD_BIN}) or MariaDB 10.6 or later ({MARIADB_NOPAD_BIN})"
        )),
    }
}

/// The `wsrep_sync_wait` of broker sessions on a Galera node: 7, the sum of READ (`SELECT`,
/// `BEGIN`), UPDATE/DELETE and INSERT/REPLACE. Every statement the broker sends first waits until the node
/// has applied every write set the cluster committed before it began, so a handle reads its own
/// and every other node's committed writes (read-your-writes), a check-then-write decides on
/// current rows, and an insert meets a duplicate key as 1062, not as a certification conflict.
/// SHOW (8) is left out: the broker sends none.
pub const GALERA_SYNC_WAIT: u8 = 7;

/// What one broker handle learned about its server from the first connection it opened.
#[derive(Debug, Default)]
pub(crate) struct ServerInfo {
    nopad: OnceLock<&'static str>,
    galera: OnceLock<bool>,
}

impl ServerInfo {
    /// The server's NO PAD binary collation ([`nopad_collation`]), asked once per handle.
    pub(crate) async fn nopad(&self, conn: &mut MySqlConnection) -> sqlx::Result<&'static str> {
        if let Some(known) = self.nopad.get() {
            return Ok(known);
        }
        let found = nopad_of(conn).await?;
        Ok(self.nopad.get_or_init(|| found))
    }

    /// True when the server is a Galera cluster node (`wsrep_on` is ON), asked once per handle.
    pub(crate) async fn galera(&self, conn: &mut MySqlConnection) -> sqlx::Result<bool> {
        if let Some(known) = self.galera.get() {
            return Ok(*known);
        }
        let found = galera_of(conn).await?;
        Ok(*self.galera.get_or_init(|| found))
    }

    /// What an earlier connection found: `Some(true)` on a Galera node, `None` before any.
    pub(crate) fn known_galera(&self) -> Option<bool> {
        self.galera.get().copied()
    }
}

/// True when `conn`'s server is a Galera node with replication on. `SHOW VARIABLES` answers on
/// every server: MySQL without wsrep returns no row, MariaDB without a provider `OFF`.
pub(crate) async fn galera_of(conn: &mut MySqlConnection) -> sqlx::Result<bool> {
    let row: Option<(String, String)> =
        sqlx::query_as("SHOW GLOBAL VARIABLES LIKE 'wsrep_on'").fetch_optional(&mut *conn).await?;
    Ok(row.is_some_and(|(_, value)| value.eq_ignore_ascii_case("ON")))
}

/// The NO PAD binary collation of the server `conn` is connected to.
pub(crate) async fn nopad_of(conn: &mut MySqlConnection) -> sqlx::Result<&'static str> {
    let version: String = sqlx::query_scalar("SELECT VERSION()").fetch_one(&mut *conn).await?;
    nopad_collation(&version).map_err(|why| sqlx::Error::Configuration(why.into()))
}

/// Sets up a new broker session: READ COMMITTED (extensions §E6: at REPEATABLE READ concurrent
/// inserts and completions deadlock on gap locks), `innodb_lock_wait_timeout` = `lock_wait`
/// seconds, and the server's NO PAD binary collation for the connection (`utf8mb4`), so
/// literals and parameters compare like the name columns: by bytes, without padding. On a
/// Galera node also `wsrep_sync_wait` = [`GALERA_SYNC_WAIT`] (read-your-writes across nodes).
pub(crate) async fn setup_session(
    conn: &mut MySqlConnection,
    lock_wait: u64,
    info: &ServerInfo,
) -> sqlx::Result<()> {
    let collation = info.nopad(conn).await?;
    conn.execute("SET SESSION TRANSACTION ISOLATION LEVEL READ COMMITTED").await?;
    let mut set = format!(
        "SET SESSION innodb_lock_wait_timeout = {lock_wait}, collation_connection = '{collation}'"
    );
    if info.galera(conn).await? {
        set.push_str(&format!(", wsrep_sync_wait = {GALERA_SYNC_WAIT}"));
    }
    conn.execute(set.as_str()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use rstest::rstest;

    use super::*;

    #[rstest]
    #[case::mariadb_debian("10.11.19-MariaDB-0+deb12u1", Ok(MARIADB_NOPAD_BIN))]
    #[case::mariadb_replication_prefix("5.5.5-10.6.12-MariaDB-log", Ok(MARIADB_NOPAD_BIN))]
    #[case::mariadb_11("11.4.2-MariaDB", Ok(MARIADB_NOPAD_BIN))]
    #[case::mysql_80_first_with_0900_bin("8.0.17", Ok(MYSQL_NOPAD_BIN))]
    #[case::mysql_80("8.0.36", Ok(MYSQL_NOPAD_BIN))]
    #[case::mysql_84_lts("8.4.0", Ok(MYSQL_NOPAD_BIN))]
    #[case::mysql_9("9.1.0", Ok(MYSQL_NOPAD_BIN))]
    #[case::mysql_with_suffix("8.0.39-0ubuntu0.22.04.1", Ok(MYSQL_NOPAD_BIN))]
    #[case::mysql_80_before_0900_bin("8.0.16", Err(()))]
    #[case::mysql_57("5.7.44-log", Err(()))]
    #[case::garbage("unknown", Err(()))]
    fn picks_the_no_pad_binary_collation_by_server(
        #[case] version: &str,
        #[case] expected: Result<&str, ()>,
    ) {
        let got = nopad_collation(version);
        assert_eq!(got.clone().map_err(|_| ()), expected, "{version}: {got:?}");
        if let Err(why) = got {
            assert!(why.contains("8.0.17") && why.contains(version), "{why}");
        }
    }
}
