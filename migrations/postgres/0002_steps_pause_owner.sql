-- taskgate schema version 2 (PostgreSQL): stepwise tasks (extensions §E3), operator resume
-- (§E5), owner (§E9), queue pause (§E4), quota window length for prune (§E16), and the index
-- retention needs.
-- The step checkpoint (`Task::cursor`); not named `cursor`, a reserved word in MySQL.
ALTER TABLE {prefix}tasks ADD COLUMN step_cursor BYTEA;
ALTER TABLE {prefix}tasks ADD COLUMN progress BIGINT;
ALTER TABLE {prefix}tasks ADD COLUMN message TEXT NOT NULL DEFAULT '';
ALTER TABLE {prefix}tasks ADD COLUMN steps BIGINT NOT NULL DEFAULT 0;
ALTER TABLE {prefix}tasks ADD COLUMN resumes BIGINT NOT NULL DEFAULT 0;
ALTER TABLE {prefix}tasks ADD COLUMN owner TEXT COLLATE "C" NOT NULL DEFAULT '';
CREATE TABLE {prefix}paused_queues (
    queue     TEXT COLLATE "C" NOT NULL,
    paused_at BIGINT NOT NULL,
    CONSTRAINT {prefix}paused_queues_pkey PRIMARY KEY (queue)
);
ALTER TABLE {prefix}quota ADD COLUMN period BIGINT NOT NULL DEFAULT 0;
-- 1 once the task got a child edge that is not done yet (set under the task's row lock, with
-- the edge; never cleared). An ack reads it from the row it completes: after waiting for that
-- row's lock, READ COMMITTED gives the statement the row's new version but not a new snapshot
-- of task_deps, so only a flag on the row itself can show a child enqueued meanwhile (§5.2).
ALTER TABLE {prefix}tasks ADD COLUMN has_children BIGINT NOT NULL DEFAULT 0;
UPDATE {prefix}tasks SET has_children = 1
    WHERE id IN (SELECT parent_id FROM {prefix}task_deps WHERE done = 0);
-- Retention scans finished tasks by finish time.
CREATE INDEX {prefix}idx_finished ON {prefix}tasks (finished_at, id) WHERE finished_at > 0;
