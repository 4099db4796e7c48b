-- taskgate schema version 5 (SQLite): the audit log of operator actions (extensions §E13).
-- One row per action taken through `Broker::audited` (the admin API): written in the same
-- transaction as the change it records, or alone for an action the contract rejected.
-- `at_ms` is the broker's clock in milliseconds; `outcome` is `ok` or an error code.
CREATE TABLE {prefix}audit (
    id          TEXT    NOT NULL PRIMARY KEY,
    at_ms       INTEGER NOT NULL,
    actor       TEXT    NOT NULL,
    action_name TEXT    NOT NULL,
    target      TEXT    NOT NULL,
    outcome     TEXT    NOT NULL,
    detail      TEXT    NOT NULL DEFAULT ''
);
-- The log is read newest first.
CREATE INDEX {prefix}idx_audit_at ON {prefix}audit (at_ms, id);
