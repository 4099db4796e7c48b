-- taskgate schema version 4 (MySQL 8.0.17+ / MariaDB 10.6+): task priorities. A claim takes the
-- ready tasks of its queues in (priority, run_at, id) order, smaller priority first; every
-- existing task gets the default priority 0, so its claim order is the (run_at, id) order it
-- had. BIGINT like every integer column; the API's i16 and its range (-100..=100) are checked
-- before any write.
--
-- Idempotent for a re-run after a crash: an `ADD COLUMN` that already ran fails with 1060 and
-- an `ADD KEY` with 1061, both "already applied" for the runner.
ALTER TABLE {prefix}tasks ADD COLUMN priority BIGINT NOT NULL DEFAULT 0;
-- The claim reads this index in its order (forced, like idx_ready) and stops after the rows it
-- takes; `ready_queue` is NULL for every row that is not claimable. idx_ready
-- (ready_queue, run_at, id) stays for the next-due probe and queue_len, which need the
-- earliest run_at of a queue whatever the priorities.
ALTER TABLE {prefix}tasks ADD KEY {prefix}idx_ready_prio (ready_queue, priority, run_at, id);
