-- taskgate schema version 1 (MySQL 8.0+ / MariaDB 10.6+): the tables and indexes of contract
-- §11.1. `{prefix}` is replaced by the table prefix (default `taskgate_`). Statements end with
-- `;` at the end of a line. Applied once by the migration runner under GET_LOCK and recorded
-- in `{prefix}schema_migrations`.
--
-- MySQL commits DDL implicitly, so a cold start that died half-way re-runs this file: every
-- statement is idempotent (`IF NOT EXISTS`; indexes are part of their CREATE TABLE).
--
-- Tables and columns are `utf8mb4_bin`: IDs compare by bytes ("abc" and "ABC" are two tasks,
-- and ORDER BY id is byte order, as on SQLite and PostgreSQL). MySQL has no partial indexes,
-- so the two identity invariants (§8.5) are UNIQUE keys on STORED generated columns that are
-- NULL for every row the invariant does not constrain (NULLs never collide).
--
-- `last_error` and `depends_on` are MEDIUMTEXT, not TEXT (64 KiB): a handler's error text has
-- no length limit, and a `depends_on` list of 1,000 parents of 255 four-byte characters
-- (extensions §E7) is about 1 MiB of JSON. Strict mode would reject either in a TEXT column.
CREATE TABLE IF NOT EXISTS {prefix}tasks (
    id               VARCHAR(255) NOT NULL,
    type             VARCHAR(255) NOT NULL,
    queue            VARCHAR(255) NOT NULL,
    payload          LONGBLOB     NULL,
    status           VARCHAR(32)  NOT NULL,
    result           LONGBLOB     NULL,
    last_error       MEDIUMTEXT   NULL,
    attempts         BIGINT       NOT NULL DEFAULT 0,
    max_retry        BIGINT       NOT NULL DEFAULT 0,
    lease_lost       BIGINT       NOT NULL DEFAULT 0,
    throttled        BIGINT       NOT NULL DEFAULT 0,
    run_at           BIGINT       NOT NULL,
    depends_on       MEDIUMTEXT   NULL,
    on_parent_fail   VARCHAR(32)  NOT NULL DEFAULT 'fail_fast',
    pending_parents  BIGINT       NOT NULL DEFAULT 0,
    lease_token      VARCHAR(64)  NOT NULL DEFAULT '',
    lease_until      BIGINT       NOT NULL DEFAULT 0,
    cancel_requested BIGINT       NOT NULL DEFAULT 0,
    created_at       BIGINT       NOT NULL,
    started_at       BIGINT       NOT NULL DEFAULT 0,
    finished_at      BIGINT       NOT NULL DEFAULT 0,
    business_key     VARCHAR(255) NOT NULL DEFAULT '',
    replay_of        VARCHAR(255) NOT NULL DEFAULT '',
    chain_head_key   VARCHAR(255) GENERATED ALWAYS AS
        (IF(business_key <> '' AND replay_of = '', business_key, NULL)) STORED,
    replay_of_uq     VARCHAR(255) GENERATED ALWAYS AS
        (IF(replay_of <> '', replay_of, NULL)) STORED,
    PRIMARY KEY (id),
    KEY {prefix}idx_claim (queue, status, run_at),
    KEY {prefix}idx_status (status, lease_until),
    UNIQUE KEY {prefix}uq_chain_head (chain_head_key),
    UNIQUE KEY {prefix}uq_replay_of (replay_of_uq),
    KEY {prefix}idx_business_key (business_key)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS {prefix}task_deps (
    child_id  VARCHAR(255) NOT NULL,
    parent_id VARCHAR(255) NOT NULL,
    done      BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (child_id, parent_id),
    KEY {prefix}idx_deps_parent (parent_id, done)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
CREATE TABLE IF NOT EXISTS {prefix}quota (
    qkey VARCHAR(255) NOT NULL,
    win  BIGINT       NOT NULL,
    used BIGINT       NOT NULL,
    PRIMARY KEY (qkey, win)
) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin;
