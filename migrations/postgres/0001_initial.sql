-- taskgate schema version 1 (PostgreSQL): the tables and indexes of contract §11.1.
-- `{prefix}` is replaced by the table prefix (default `taskgate_`). Statements end with `;` at
-- the end of a line. Applied once, in a transaction, under `pg_advisory_lock` by the migration
-- runner, and recorded in `{prefix}schema_migrations`.
-- Every text column that is compared or ordered (IDs, keys, queues, statuses) uses
-- COLLATE "C": IDs compare by bytes whatever the database's default collation is.
CREATE TABLE {prefix}tasks (
    id               TEXT COLLATE "C" NOT NULL,
    type             TEXT COLLATE "C" NOT NULL,
    queue            TEXT COLLATE "C" NOT NULL,
    payload          BYTEA,
    status           TEXT COLLATE "C" NOT NULL,
    result           BYTEA,
    last_error       TEXT   NOT NULL DEFAULT '',
    attempts         BIGINT NOT NULL DEFAULT 0,
    max_retry        BIGINT NOT NULL DEFAULT 0,
    lease_lost       BIGINT NOT NULL DEFAULT 0,
    throttled        BIGINT NOT NULL DEFAULT 0,
    run_at           BIGINT NOT NULL,
    depends_on       TEXT   NOT NULL DEFAULT '[]',
    on_parent_fail   TEXT   NOT NULL DEFAULT 'fail_fast',
    pending_parents  BIGINT NOT NULL DEFAULT 0,
    lease_token      TEXT COLLATE "C" NOT NULL DEFAULT '',
    lease_until      BIGINT NOT NULL DEFAULT 0,
    cancel_requested BIGINT NOT NULL DEFAULT 0,
    created_at       BIGINT NOT NULL,
    started_at       BIGINT NOT NULL DEFAULT 0,
    finished_at      BIGINT NOT NULL DEFAULT 0,
    business_key     TEXT COLLATE "C" NOT NULL DEFAULT '',
    replay_of        TEXT COLLATE "C" NOT NULL DEFAULT '',
    CONSTRAINT {prefix}tasks_pkey PRIMARY KEY (id)
);
-- The claim and reaper indexes of §11.1, partial: only the rows their statements can match
-- (ready; running or blocked) are in them, so finished rows never enter the hot path and a
-- status change writes as few index entries as possible. The predicates are constants, so
-- generic (cached) plans use them too. Claims, the next-due probe and queue_len read the
-- ready tasks of one queue in (run_at, id) order.
CREATE INDEX {prefix}idx_claim ON {prefix}tasks (queue, run_at, id)
    WHERE status IN ('pending', 'retrying');
CREATE INDEX {prefix}idx_status ON {prefix}tasks (status, lease_until)
    WHERE status IN ('running', 'blocked');
CREATE UNIQUE INDEX {prefix}uq_chain_head ON {prefix}tasks (business_key)
    WHERE business_key <> '' AND replay_of = '';
CREATE UNIQUE INDEX {prefix}uq_replay_of ON {prefix}tasks (replay_of) WHERE replay_of <> '';
CREATE INDEX {prefix}idx_business_key ON {prefix}tasks (business_key) WHERE business_key <> '';
CREATE TABLE {prefix}task_deps (
    child_id  TEXT COLLATE "C" NOT NULL,
    parent_id TEXT COLLATE "C" NOT NULL,
    done      BIGINT NOT NULL DEFAULT 0,
    CONSTRAINT {prefix}task_deps_pkey PRIMARY KEY (child_id, parent_id)
);
CREATE INDEX {prefix}idx_deps_parent ON {prefix}task_deps (parent_id, done);
CREATE TABLE {prefix}quota (
    qkey TEXT COLLATE "C" NOT NULL,
    win  BIGINT NOT NULL,
    used BIGINT NOT NULL,
    CONSTRAINT {prefix}quota_pkey PRIMARY KEY (qkey, win)
);
