//! The embedded SQLite migrations (`migrations/sqlite/`), the same version numbers and names as
//! every other dialect's (extensions §E6).

use taskgate_sql::Migration;

/// Every migration, in version order. Append only.
pub static MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../../../migrations/sqlite/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "steps_pause_owner",
        sql: include_str!("../../../migrations/sqlite/0002_steps_pause_owner.sql"),
    },
    Migration {
        version: 3,
        name: "names_by_bytes",
        sql: include_str!("../../../migrations/sqlite/0003_names_by_bytes.sql"),
    },
    Migration {
        version: 4,
        name: "priority",
        sql: include_str!("../../../migrations/sqlite/0004_priority.sql"),
    },
    Migration {
        version: 5,
        name: "audit",
        sql: include_str!("../../../migrations/sqlite/0005_audit.sql"),
    },
    Migration {
        version: 6,
        name: "ack_token",
        sql: include_str!("../../../migrations/sqlite/0006_ack_token.sql"),
    },
    Migration {
        version: 7,
        name: "heartbeat",
        sql: include_str!("../../../migrations/sqlite/0007_heartbeat.sql"),
    },
];
