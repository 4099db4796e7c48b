-- taskgate schema version 2 (SQLite): stepwise tasks (extensions §E3), operator resume (§E5),
-- owner (§E9), queue pause (§E4), quota window length for prune (§E16), and hot-path indexes
-- that hold only the rows their statements want (§E6: finished rows never enter them).
-- The step checkpoint (`Task::cursor`); not named `cursor`, a reserved word in MySQL.
ALTER TABLE {prefix}tasks ADD COLUMN step_cursor BLOB;
ALTER TABLE {prefix}tasks ADD COLUMN progress INTEGER;
ALTER TABLE {prefix}tasks ADD COLUMN message TEXT NOT NULL DEFAULT '';
ALTER TABLE {prefix}tasks ADD COLUMN steps INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}tasks ADD COLUMN resumes INTEGER NOT NULL DEFAULT 0;
ALTER TABLE {prefix}tasks ADD COLUMN owner TEXT NOT NULL DEFAULT '';
CREATE TABLE {prefix}paused_queues (
    queue     TEXT    NOT NULL PRIMARY KEY,
    paused_at INTEGER NOT NULL
);
ALTER TABLE {prefix}quota ADD COLUMN period INTEGER NOT NULL DEFAULT 0;
-- 1 once the task got a child edge that is not done yet (set under the task's row lock, with
-- the edge; never cleared): an ack reads it from the row it completes, so a child enqueued
-- while the ack waited for that row is never missed (contract §5.2). Existing open edges set it.
ALTER TABLE {prefix}tasks ADD COLUMN has_children INTEGER NOT NULL DEFAULT 0;
UPDATE {prefix}tasks SET has_children = 1
    WHERE id IN (SELECT parent_id FROM {prefix}task_deps WHERE done = 0);
-- Claims, the next-due probe and queue_len read claimable tasks of one queue in (run_at, id)
-- order; the reaper reads running tasks, defensive repair blocked ones, both in id order.
CREATE INDEX {prefix}idx_ready ON {prefix}tasks (queue, run_at, id)
    WHERE status IN ('pending', 'retrying');
CREATE INDEX {prefix}idx_running ON {prefix}tasks (id, lease_until) WHERE status = 'running';
CREATE INDEX {prefix}idx_blocked ON {prefix}tasks (id) WHERE status = 'blocked';
-- They replace 0001's idx_claim and idx_status, whose entries included every finished task:
-- each status change then cost two more index writes (measured: claim+ack 40-65 % faster
-- without them). List, counts and prune scan the table, as contract §7.2 accepts for admin
-- queries.
DROP INDEX {prefix}idx_claim;
DROP INDEX {prefix}idx_status;
