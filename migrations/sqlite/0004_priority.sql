-- taskgate schema version 4 (SQLite): task priorities. A claim takes the ready tasks of its
-- queues in (priority, run_at, id) order, smaller priority first; every existing task gets the
-- default priority 0, so its claim order is the (run_at, id) order it had.
ALTER TABLE {prefix}tasks ADD COLUMN priority INTEGER NOT NULL DEFAULT 0;
-- The claim reads this index in its order and stops after the rows it takes. idx_ready
-- (queue, run_at, id) stays for the next-due probe and queue_len, which need the earliest
-- run_at of a queue whatever the priorities (one index entry per queue).
CREATE INDEX {prefix}idx_ready_prio ON {prefix}tasks (queue, priority, run_at, id)
    WHERE status IN ('pending', 'retrying');
