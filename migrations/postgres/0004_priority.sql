-- taskgate schema version 4 (PostgreSQL): task priorities. A claim takes the ready tasks of its
-- queues in (priority, run_at, id) order, smaller priority first; every existing task gets the
-- default priority 0 (a constant default: no table rewrite), so its claim order is the
-- (run_at, id) order it had. BIGINT like every integer column; the API's i16 and its range
-- (-100..=100) are checked before any write.
ALTER TABLE {prefix}tasks ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;
-- The claim reads this index in its order and stops after the rows it takes. idx_claim
-- (queue, run_at, id) stays for the next-due probe and queue_len, which need the earliest
-- run_at of a queue whatever the priorities (one index entry per queue).
CREATE INDEX {prefix}idx_ready_prio ON {prefix}tasks (queue, priority, run_at, id)
    WHERE status IN ('pending', 'retrying');
