//! The embedded PostgreSQL migrations (`migrations/postgres/`), the same version numbers and
//! names as every other dialect's (extensions §E6).

use taskgate_sql::Migration;

/// Every migration, in version order. Append only.
pub static MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        name: "initial",
        sql: include_str!("../../../migrations/postgres/0001_initial.sql"),
    },
    Migration {
        version: 2,
        name: "steps_pause_owner",
        sql: include_str!("../../../migrations/postgres/0002_steps_pause_owner.sql"),
    },
    Migration {
        version: 3,
        name: "names_by_bytes",
        sql: include_str!("../../../migrations/postgres/0003_names_by_bytes.sql"),
    },
    Migration {
        version: 4,
        name: "priority",
        sql: include_str!("../../../migrations/postgres/0004_priority.sql"),
    },
    Migration {
        version: 5,
        name: "audit",
        sql: include_str!("../../../migrations/postgres/0005_audit.sql"),
    },
    Migration {
        version: 6,
        name: "ack_token",
        sql: include_str!("../../../migrations/postgres/0006_ack_token.sql"),
    },
    Migration {
        version: 7,
        name: "heartbeat",
        sql: include_str!("../../../migrations/postgres/0007_heartbeat.sql"),
    },
];
