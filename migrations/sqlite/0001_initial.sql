-- taskgate schema version 1 (SQLite): the tables and indexes of contract §11.1.
-- `{prefix}` is replaced by the table prefix (default `taskgate_`). Statements end with `;` at
-- the end of a line. Applied once by the migration runner and recorded in
-- `{prefix}schema_migrations`.
CREATE TABLE {prefix}tasks (
    id               TEXT    NOT NULL PRIMARY KEY,
    type             TEXT    NOT NULL,
    queue            TEXT    NOT NULL,
    payload          BLOB,
    status           TEXT    NOT NULL,
    result           BLOB,
    last_error       TEXT    NOT NULL DEFAULT '',
    attempts         INTEGER NOT NULL DEFAULT 0,
    max_retry        INTEGER NOT NULL DEFAULT 0,
    lease_lost       INTEGER NOT NULL DEFAULT 0,
    throttled        INTEGER NOT NULL DEFAULT 0,
    run_at           INTEGER NOT NULL,
    depends_on       TEXT    NOT NULL DEFAULT '[]',
    on_parent_fail   TEXT    NOT NULL DEFAULT 'fail_fast',
    pending_parents  INTEGER NOT NULL DEFAULT 0,
    lease_token      TEXT    NOT NULL DEFAULT '',
    lease_until      INTEGER NOT NULL DEFAULT 0,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    created_at       INTEGER NOT NULL,
    started_at       INTEGER NOT NULL DEFAULT 0,
    finished_at      INTEGER NOT NULL DEFAULT 0,
    business_key     TEXT    NOT NULL DEFAULT '',
    replay_of        TEXT    NOT NULL DEFAULT ''
);
CREATE INDEX {prefix}idx_claim ON {prefix}tasks (queue, status, run_at);
CREATE INDEX {prefix}idx_status ON {prefix}tasks (status, lease_until);
CREATE UNIQUE INDEX {prefix}uq_chain_head ON {prefix}tasks (business_key)
    WHERE business_key <> '' AND replay_of = '';
CREATE UNIQUE INDEX {prefix}uq_replay_of ON {prefix}tasks (replay_of) WHERE replay_of <> '';
CREATE INDEX {prefix}idx_business_key ON {prefix}tasks (business_key) WHERE business_key <> '';
CREATE TABLE {prefix}task_deps (
    child_id  TEXT    NOT NULL,
    parent_id TEXT    NOT NULL,
    done      INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (child_id, parent_id)
);
CREATE INDEX {prefix}idx_deps_parent ON {prefix}task_deps (parent_id, done);
CREATE TABLE {prefix}quota (
    qkey TEXT    NOT NULL,
    win  INTEGER NOT NULL,
    used INTEGER NOT NULL,
    PRIMARY KEY (qkey, win)
);
