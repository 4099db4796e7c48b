-- taskgate schema version 5 (PostgreSQL): the audit log of operator actions (extensions §E13).
-- One row per action taken through `Broker::audited` (the admin API): written in the same
-- transaction as the change it records, or alone for an action the contract rejected.
-- `at_ms` is the broker's clock in milliseconds; `outcome` is `ok` or an error code.
CREATE TABLE {prefix}audit (
    id          TEXT COLLATE "C" NOT NULL,
    at_ms       BIGINT NOT NULL,
    actor       TEXT COLLATE "C" NOT NULL,
    action_name TEXT COLLATE "C" NOT NULL,
    target      TEXT COLLATE "C" NOT NULL,
    outcome     TEXT COLLATE "C" NOT NULL,
    detail      TEXT NOT NULL DEFAULT '',
    CONSTRAINT {prefix}audit_pkey PRIMARY KEY (id)
);
-- The log is read newest first.
CREATE INDEX {prefix}idx_audit_at ON {prefix}audit (at_ms, id);
