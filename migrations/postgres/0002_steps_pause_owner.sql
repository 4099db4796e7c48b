-- taskgate schema version 2 (PostgreSQL): stepwise tasks (extensions §E3), operator resume
-- (§E5), owner (§E9), queue pause (§E4), quota window length for prune (§E16), and the index
-- retention needs.
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
-- Retention scans finished tasks by finish time.
CREATE INDEX {prefix}idx_finished ON {prefix}tasks (finished_at, id) WHERE finished_at > 0;
