-- taskgate schema version 2 (PostgreSQL): stepwise tasks (extensions §E3), operator resume
-- (§E5), owner (§E9), queue pause (§E4), quota window length for prune (§E16), and the indexes
-- the hot statements need (§E6: finished rows never enter the hot path).
ALTER TABLE {prefix}tasks ADD COLUMN cursor BYTEA;
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
-- Claims, the next-due probe and queue_len read the ready tasks of one queue in (run_at, id)
-- order; the predicate is a constant, so generic (cached) plans use it too.
CREATE INDEX {prefix}idx_ready ON {prefix}tasks (queue, run_at, id)
    WHERE status IN ('pending', 'retrying');
-- Key lookups (enqueue's chain-tail check, replay by key, prune of keyed chains) bind the key
-- as a parameter, which a generic plan cannot prove non-empty: a full index serves them.
CREATE INDEX {prefix}idx_key_created ON {prefix}tasks (business_key, created_at, id);
-- "Is this execution replayed?" binds the ID as a parameter: same reason.
CREATE INDEX {prefix}idx_replay_of ON {prefix}tasks (replay_of);
-- Retention scans finished tasks by finish time.
CREATE INDEX {prefix}idx_finished ON {prefix}tasks (finished_at, id) WHERE finished_at > 0;
