-- taskgate schema version 2 (SQLite): stepwise tasks (extensions §E3), operator resume (§E5),
-- owner (§E9), queue pause (§E4), quota window length for prune (§E16), and the claim index
-- whose rows are only claimable tasks (§E6: finished rows never enter the hot path).
ALTER TABLE {prefix}tasks ADD COLUMN cursor BLOB;
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
-- Claims and the next-due probe read ready tasks of one queue in (run_at, id) order.
CREATE INDEX {prefix}idx_ready ON {prefix}tasks (queue, run_at, id)
    WHERE status IN ('pending', 'retrying');
