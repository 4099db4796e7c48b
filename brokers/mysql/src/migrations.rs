//! The MySQL/MariaDB migrations (`migrations/mysql/`), embedded in the binary with the same
//! version numbers and names as every other dialect's (extensions §E6).

use taskgate_sql::Migration;

/// Every migration, in version order.
pub static MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../../../migrations/mysql/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "steps_pause_owner",
        sql: include_str!("../../../migrations/mysql/0002_steps_pause_owner.sql"),
    },
    Migration {
        version: 3,
        name: "names_by_bytes",
        sql: include_str!("../../../migrations/mysql/0003_names_by_bytes.sql"),
    },
    Migration {
        version: 4,
        name: "priority",
        sql: include_str!("../../../migrations/mysql/0004_priority.sql"),
    },
    Migration {
        version: 5,
        name: "audit",
        sql: include_str!("../../../migrations/mysql/0005_audit.sql"),
    },
    Migration {
        version: 6,
        name: "ack_token",
        sql: include_str!("../../../migrations/mysql/0006_ack_token.sql"),
    },
    Migration {
        version: 7,
        name: "heartbeat",
        sql: include_str!("../../../migrations/mysql/0007_heartbeat.sql"),
    },
];

#[cfg(test)]
mod tests {
    use super::*;

    fn ddl_with(prefix: &str, nopad: &str) -> String {
        let vars =
            [("prefix".to_owned(), prefix.to_owned()), ("nopad_bin".to_owned(), nopad.to_owned())];
        let texts = MIGRATIONS.iter().map(|m| taskgate_sql::substitute(m.sql, &vars));
        texts.collect::<Result<Vec<_>, _>>().map(|t| t.join("\n")).unwrap_or_default()
    }

    fn ddl(prefix: &str) -> String {
        ddl_with(prefix, crate::MARIADB_NOPAD_BIN)
    }

    #[test]
    fn every_name_column_gets_the_no_pad_collation_of_either_server() {
        for nopad in [crate::MARIADB_NOPAD_BIN, crate::MYSQL_NOPAD_BIN] {
            let sql = ddl_with("p_", nopad);
            assert!(!sql.is_empty(), "every placeholder has a value");
            for column in [
                "id",
                "type",
                "queue",
                "lease_token",
                "business_key",
                "replay_of",
                "owner",
                "chain_head_key",
                "replay_of_uq",
                "ready_queue",
                "child_id",
                "parent_id",
                "qkey",
            ] {
                let modify = format!("MODIFY {column} VARCHAR(");
                let line = sql.lines().find(|l| l.trim_start().starts_with(&modify));
                let line = line.unwrap_or_else(|| panic!("0003 does not modify {column}"));
                assert!(line.contains(&format!("COLLATE {nopad}")), "{column}: {line}");
            }
            let default = format!("DEFAULT CHARACTER SET utf8mb4 COLLATE {nopad};");
            assert_eq!(sql.matches(&default).count(), 4, "every table's default collation");
        }
    }

    #[test]
    fn ddl_names_the_prefix_and_the_mysql_types() {
        let sql = ddl("tgunit_");
        for needle in [
            "tgunit_tasks",
            "tgunit_task_deps",
            "tgunit_quota",
            "tgunit_paused_queues",
            "tgunit_idx_claim",
            "tgunit_uq_chain_head",
            "tgunit_uq_replay_of",
            "COLLATE=utf8mb4_bin",
            "VARCHAR(255)",
            "LONGBLOB",
            "ENGINE=InnoDB",
            "STORED",
        ] {
            assert!(sql.contains(needle), "DDL lacks {needle}");
        }
        assert!(!sql.contains("{prefix}"));
        let tables = sql.matches("CREATE TABLE IF NOT EXISTS").count();
        assert_eq!(
            sql.matches("COLLATE=utf8mb4_bin").count(),
            tables,
            "every table is utf8mb4_bin"
        );
    }

    #[test]
    fn versions_and_names_match_the_sqlite_migrations() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../migrations/sqlite");
        let mut sqlite: Vec<String> = std::fs::read_dir(&dir)
            .map(|entries| entries.filter_map(|e| e.ok()?.file_name().into_string().ok()).collect())
            .unwrap_or_default();
        sqlite.sort();
        let ours: Vec<String> =
            MIGRATIONS.iter().map(|m| format!("{:04}_{}.sql", m.version, m.name)).collect();
        assert_eq!(ours, sqlite);
    }

    #[test]
    fn every_statement_is_idempotent() {
        for statement in taskgate_sql::split_statements(&ddl("p_")) {
            let ok = statement.starts_with("CREATE TABLE IF NOT EXISTS")
                || statement.contains(" MODIFY ")
                || statement.contains(" DEFAULT CHARACTER SET ")
                || statement.contains(" ADD COLUMN ")
                || statement.contains(" ADD KEY ")
                || statement.contains(" DROP KEY ")
                || statement.starts_with("UPDATE ");
            assert!(ok, "not idempotent on a re-run: {statement}");
        }
    }
}
